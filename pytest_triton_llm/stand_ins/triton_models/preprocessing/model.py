"""`preprocessing`: text -> token ids, stop/bad word lists, end/pad ids (the upstream tensor contract).

Parameters: tokenizer_dir, add_special_tokens, and for a multimodal deployment multimodal_model_path, gpt_model_path and
max_num_images (as in tensorrtllm_backend's preprocessing model: multimodal.py); stand_in_fault (stand_in_faults.py).
"""

from __future__ import annotations

import numpy as np
import triton_python_backend_utils as pb_utils
from hf_tokenizer import load_text_tokenizer
from multimodal import NO_VISION_PREPROCESSOR, LlavaPrompt
from stand_in_faults import Faults
from triton_io import each_answered, flag, model_parameters, optional_input
from words import to_word_list_format


def _text(value, what: str) -> str:
    if isinstance(value, str):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8: {exc}") from None


class TritonPythonModel:
    def initialize(self, args):
        params = model_parameters(args)
        self.add_special_tokens = flag(params.get("add_special_tokens"), True)
        self.tokenizer = load_text_tokenizer(params["tokenizer_dir"])
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.end_id = self.tokenizer.encode(self.tokenizer.eos_token, add_special_tokens=False)[0]
        self.pad_id = self.tokenizer.encode(self.tokenizer.pad_token, add_special_tokens=False)[0]
        self.vocab = len(self.tokenizer)
        self.fault = Faults(params, "preprocessing")
        encode = lambda text: self.tokenizer.encode(text, add_special_tokens=self.add_special_tokens)  # noqa: E731
        self.multimodal = LlavaPrompt.of(params, encode)
        # ids from here on are prompt-table rows: the checkpoint's vocab_size where an image's rows come after it
        self.table_from = self.vocab if self.multimodal is None else self.multimodal.vocab_size

    def _encode_words(self, word):
        return self.tokenizer.encode(_text(word, "a stop/bad word"), add_special_tokens=False)

    def _one(self, request):
        query = pb_utils.get_input_tensor_by_name(request, "QUERY").as_numpy()
        batch = query.shape[0]
        ids = [
            self.tokenizer.encode(_text(q.reshape(-1)[0], "text_input"), add_special_tokens=self.add_special_tokens)
            for q in query
        ]
        if self.fault("bos_doubled") and self.tokenizer.bos_token_id is not None:  # a BOS before the prompt's own
            ids = [[self.tokenizer.bos_token_id, *i] for i in ids]
        if self.fault("prompt_start_token_dropped"):  # SmolLM2 adds no BOS to drop: the prompt's own first token goes
            ids = [i[1:] for i in ids]
        if self.multimodal is not None:
            if any(optional_input(request, name) is not None for name in ("IMAGE_BYTES", "IMAGE_URL", "VIDEO_BYTES")):
                raise ValueError(NO_VISION_PREPROCESSOR)
            ids = [self.multimodal.wrap(i, self.fault("image_rows_offset_by_one")) for i in ids]
        width = max(len(i) for i in ids)  # 0 for an empty text that the tokenizer adds nothing to, as upstream sends it
        input_ids = np.full((batch, width), self.pad_id, dtype=np.int32)
        for row, seq in enumerate(ids):
            input_ids[row, : len(seq)] = seq
        lengths = np.array([[len(i)] for i in ids], dtype=np.int32)

        def per_row(name, default):
            value = optional_input(request, name)
            return np.full((batch, 1), default, dtype=np.int32) if value is None else value.astype(np.int32).reshape(batch, 1)

        end_id, pad_id = per_row("END_ID", self.end_id), per_row("PAD_ID", self.pad_id)
        bad = optional_input(request, "BAD_WORDS_DICT")
        stop = None if self.fault("stop_words_ignored") else optional_input(request, "STOP_WORDS_DICT")
        outputs = [
            pb_utils.Tensor("INPUT_ID", input_ids),
            pb_utils.Tensor("REQUEST_INPUT_LEN", lengths),
            pb_utils.Tensor("DECODER_INPUT_ID", pad_id.copy()),
            pb_utils.Tensor("REQUEST_DECODER_INPUT_LEN", np.ones((batch, 1), dtype=np.int32)),
            pb_utils.Tensor("BAD_WORDS_IDS", to_word_list_format(bad, batch, self._encode_words)),
            pb_utils.Tensor("STOP_WORDS_IDS", to_word_list_format(stop, batch, self._encode_words)),
            pb_utils.Tensor("EMBEDDING_BIAS", self._embedding_bias(request, batch)),
            pb_utils.Tensor("REQUEST_OUTPUT_LEN", pb_utils.get_input_tensor_by_name(request, "REQUEST_OUTPUT_LEN").as_numpy()),
            pb_utils.Tensor("OUT_END_ID", end_id),
            pb_utils.Tensor("OUT_PAD_ID", pad_id),
        ]
        extra = optional_input(request, "PROMPT_TABLE_EXTRA_ID")
        if extra is not None:
            table = np.where(input_ids >= self.table_from, extra.reshape(batch, 1), 0).astype(np.uint64)
            outputs.append(pb_utils.Tensor("OUT_PROMPT_TABLE_EXTRA_IDS", table))
        return pb_utils.InferenceResponse(output_tensors=outputs)

    def _embedding_bias(self, request, batch):
        words, weights = optional_input(request, "EMBEDDING_BIAS_WORDS"), optional_input(request, "EMBEDDING_BIAS_WEIGHTS")
        if words is None or weights is None:
            return np.empty((batch, 0), dtype=np.float32)
        bias = np.zeros((batch, self.vocab), dtype=np.float32)
        for row in range(batch):
            row_words, row_weights = words[min(row, len(words) - 1)], weights[min(row, len(weights) - 1)]
            if len(row_words) != len(row_weights):
                raise ValueError("embedding_bias_words and embedding_bias_weights must have the same length")
            for word, weight in zip(row_words, row_weights, strict=True):
                for token in self._encode_words(word):
                    bias[row, token] += weight
        return bias

    def execute(self, requests):
        return each_answered(requests, self._one)
