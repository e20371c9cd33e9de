"""Load a Hugging Face tokenizer without AutoConfig.

AutoTokenizer reads the model config, which imports torch and the model code: about
4 s per python backend stub on a 2-core machine. The class named in
tokenizer_config.json loads the same tokenizer in a fraction of that.
"""

from __future__ import annotations

import json
from pathlib import Path


def load_tokenizer(directory, **kwargs):
    import transformers

    config = Path(directory) / "tokenizer_config.json"
    name = json.loads(config.read_text()).get("tokenizer_class") if config.is_file() else None
    cls = getattr(transformers, name, None) if name else None
    if cls is None:
        cls = transformers.AutoTokenizer
    return cls.from_pretrained(directory, **kwargs)
