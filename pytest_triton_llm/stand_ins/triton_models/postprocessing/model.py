"""`postprocessing`: output token ids -> text (the upstream tensor contract).

Parameters: tokenizer_dir, skip_special_tokens; stand_in_fault (stand_in_faults.py).
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils
from hf_tokenizer import load_text_tokenizer
from stand_in_faults import Faults
from triton_io import flag, model_parameters

REPLACEMENT = "\ufffd"  # what a piece that holds part of a character decodes to


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.skip_special_tokens = flag(params.get("skip_special_tokens"), True)
        self.tokenizer = load_text_tokenizer(params["tokenizer_dir"])
        self.fault = Faults(params, "postprocessing")

    def execute(self, requests):
        responses = []
        for request in requests:
            tokens = pb_utils.get_input_tensor_by_name(request, "TOKENS_BATCH").as_numpy()  # [batch, beam, len]
            lengths = pb_utils.get_input_tensor_by_name(request, "SEQUENCE_LENGTH").as_numpy()  # [batch, beam]
            sequences = [
                tokens[b, k, : int(lengths[b, k])].tolist() for b in range(tokens.shape[0]) for k in range(tokens.shape[1])
            ]
            texts = self.tokenizer.batch_decode(sequences, skip_special_tokens=self.skip_special_tokens)
            if self.fault("stream_drops_leading_space"):  # each piece decoded as if it began the text
                texts = [t.lstrip(" ") for t in texts]
            if self.fault("stream_drops_split_characters"):  # decoded with errors='ignore': the part is dropped
                texts = [t.replace(REPLACEMENT, "") for t in texts]
            if self.fault("stream_garbles_split_characters"):  # the part comes out as its byte-level BPE symbols
                texts = [self._symbols(ids) if REPLACEMENT in t else t for t, ids in zip(texts, sequences, strict=True)]
            # one string per batch row and beam, flat: [batch * beam], as upstream's postprocessing answers
            output = np.array([t.encode("utf-8") for t in texts], dtype=object)
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT", output)]))
        return responses

    def _symbols(self, ids: list[int]) -> str:
        return "".join(self.tokenizer.convert_ids_to_tokens(ids))
