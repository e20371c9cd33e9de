"""Multimodal deployments (issue 47): an image through upstream's multimodal model set, on the ensemble and the BLS.

LLaVA's contract (tensorrtllm_backend's all_models/multimodal): the client sends the image's normalized pixels as
image_input; multimodal_encoders turns them into the rows of tensorrt_llm's prompt table, and preprocessing puts the
image's fake prompt ids (vocab_size and up) into the prompt. The checks judge what the image does by value: the same
image answers the same, another image otherwise; ensemble and BLS, stream and unary, batch and alone agree; what the
contract refuses (no image on the ensemble, image bytes or a URL for a model type whose preprocessing has no vision
processor, an image of the wrong size) is one error, and the server answers the next request.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from pytest_triton_llm.multimodal.images import drawn, pixels, png
from pytest_triton_llm.properties.kv_blocks import fresh_prompt
from pytest_triton_llm.stack.kv_reuse import kv_cache_reuse, tokens_per_block
from pytest_triton_llm.triton.client import GenerationError
from pytest_triton_llm.triton.tensor_contract import returned_ids
from pytest_triton_llm.verdicts.equality import assert_agree

pytestmark = [pytest.mark.multimodal, pytest.mark.triton_llm_requires("multimodal", "image_input")]

QUESTION = "What is written in this image?"
TOKENS = 8
WORDS = (("PARIS", "white", "black"), ("TOKYO", "navy", "yellow"), ("LIMA", "darkgreen", "white"), ("OSLO", "red", "white"))
NO_IMAGE = "There is no preprocessed image tensor to encode"  # upstream's multimodal_encoders, LLaVA's path
NO_VISION_PREPROCESSOR = "Vision preprocessor for preparing images before encoding is None"  # upstream's preprocessing
LLAVA_PROMPT = ("USER:\n", " ASSISTANT:")  # upstream's preprocessing, model type llava: around the image and the text


def image_size(served) -> int:
    return served.ref.engine.vision.image_size


def image_input(served, picture) -> tuple[np.ndarray, str]:
    """image_input for one request of one image: [1 request, 1 image, 3, H, W] float16."""
    return pixels(picture, image_size(served))[np.newaxis, np.newaxis], "FP16"


def inputs(served, picture=None, question: str = QUESTION, **extra) -> dict:
    """The entry model's inputs for `question` about `picture` (none: no image_input), `extra` inputs added."""
    sent = served.client.ensemble_inputs(question, TOKENS)
    if picture is not None:
        sent["image_input"] = image_input(served, picture)
    return sent | extra


def answer(served, picture=None, **extra) -> str:
    outputs = served.client.request(served.client.ensemble, inputs(served, picture, **extra))
    return outputs["text_output"].reshape(-1)[0].decode()


def streamed(served, picture) -> str:
    sent = inputs(served, picture, stream=(np.array([[True]]), "BOOL"))
    result = served.client.stream_inputs(served.client.ensemble, sent)
    return "".join(event.outputs["text_output"].reshape(-1)[0].decode() for event in result.content_events)


def vocab_size(served) -> int:
    """The engine's vocabulary: where its prompt-table ids begin (a TensorRT-LLM engine's config.json says it in
    pretrained_config, a Hugging Face checkpoint's at its top)."""
    config = json.loads((served.engine.path / "config.json").read_text())
    return int(config.get("pretrained_config", config)["vocab_size"])


def by_hand(served, picture) -> str:
    """The answer of the ensemble's models called one by one: multimodal_encoders with the image, then tensorrt_llm
    with LLaVA's prompt (upstream's preprocessing: "USER:\n", the image's ids from vocab_size on, the question,
    " ASSISTANT:") and the encoders' table, then the tokens decoded."""
    client = served.client
    encoded = client.request("multimodal_encoders", {"IMAGE": image_input(served, picture)})
    table = encoded["OUT_PROMPT_EMBEDDING_TABLE"]
    start = vocab_size(served)
    ids = [*served.encode(LLAVA_PROMPT[0]), *range(start, start + table.shape[1]), *served.encode(QUESTION)]
    ids += served.encode(LLAVA_PROMPT[1])
    sent = client.core_inputs(ids, TOKENS, end_id=served.end_id)
    sent["prompt_embedding_table"] = (table.astype(np.float16), "FP16")
    sent["prompt_vocab_size"] = (np.array([[table.shape[1]]], dtype=np.int32), "INT32")
    return served.tokenizer.decode(returned_ids(client.request(client.core_model, sent)), skip_special_tokens=True)


def refused(served, sent: dict, words: str) -> None:
    """`sent` is answered with one error holding `words`; then an image request is answered."""
    with pytest.raises(GenerationError) as error:
        served.client.request(served.client.ensemble, sent)
    assert words in str(error.value), f"{served.client.ensemble}: {error.value}"
    assert answer(served, drawn(*WORDS[0])), f"{served.client.ensemble}: no answer after the refused request"


@pytest.fixture(scope="module")
def pictures():
    return [drawn(*w) for w in WORDS]


@pytest.mark.triton_llm_entry_models
def test_an_image_changes_the_answer_and_the_same_image_answers_the_same(triton_llm, pictures):
    first = [answer(triton_llm, p) for p in pictures]  # four words on four colours: four answers
    assert len(set(first)) == len(pictures), f"{triton_llm.client.ensemble}: {len(pictures)} different images answered {first}"
    again = [answer(triton_llm, p) for p in pictures]
    assert again == first, f"{triton_llm.client.ensemble}: the same images answered {again} after {first}"


@pytest.mark.triton_llm_requires("bls_image_input")
def test_the_bls_answers_as_the_ensemble(triton_llm, pictures, equality_rule):
    bls = triton_llm.at_entry("tensorrt_llm_bls")
    through_ensemble = [answer(triton_llm, p) for p in pictures]
    through_bls = [answer(bls, p) for p in pictures]
    assert_agree(through_ensemble, through_bls, equality_rule, triton_llm.tokenizer, "the BLS against the ensemble")


def test_the_ensemble_answers_as_its_models_called_one_by_one(triton_llm, pictures, equality_rule):
    """The image's rows land where LLaVA's prompt puts its ids: an id off by one (a vocabulary that grew by an added
    token, tensorrtllm_backend#849) shifts every row and answers otherwise."""
    chained = [answer(triton_llm, p) for p in pictures]
    manual = [by_hand(triton_llm, p) for p in pictures]
    assert_agree(manual, chained, equality_rule, triton_llm.tokenizer, "the ensemble against its models one by one")


@pytest.mark.triton_llm_requires("streaming")
@pytest.mark.triton_llm_entry_models
def test_a_streamed_image_answer_is_the_unary_one(triton_llm, pictures, equality_rule):
    unary = [answer(triton_llm, p) for p in pictures[:2]]
    stream = [streamed(triton_llm, p) for p in pictures[:2]]
    assert_agree(unary, stream, equality_rule, triton_llm.tokenizer, f"{triton_llm.client.ensemble}: streamed")


@pytest.mark.triton_llm_entry_models
def test_concurrent_image_requests_answer_as_alone(triton_llm, pictures, equality_rule):
    alone = [answer(triton_llm, p) for p in pictures]
    with ThreadPoolExecutor(len(pictures)) as pool:
        together = list(pool.map(lambda p: answer(triton_llm, p), pictures))
    assert_agree(alone, together, equality_rule, triton_llm.tokenizer, f"{triton_llm.client.ensemble}: batched")


def test_the_ensemble_refuses_a_request_without_an_image(triton_llm):
    refused(triton_llm, inputs(triton_llm), NO_IMAGE)


@pytest.mark.triton_llm_entry_models
@pytest.mark.triton_llm_checks_declared_inputs
@pytest.mark.parametrize("form", ["image_bytes_input", "image_url_input"])
def test_image_bytes_or_a_url_are_refused_where_preprocessing_has_no_vision_processor(triton_llm, pictures, form):
    """LLaVA's preprocessing processes no images (upstream's docs: the BLS takes image_input only; the ensemble's
    bytes and URL forms are for mllama, LLaVA-OneVision and Qwen2-VL): either form fails with its assertion."""
    if form not in triton_llm.client.declared_inputs(triton_llm.client.ensemble):
        pytest.skip(f"{triton_llm.client.ensemble} declares no {form}")
    data = png(pictures[0])
    value = (
        (np.frombuffer(data, dtype=np.uint8).reshape(1, 1, 1, 1, -1), "UINT8")
        if form == "image_bytes_input"
        else (np.array([["https://example.invalid/picture.png".encode()]], dtype=object), "BYTES")
    )
    refused(triton_llm, inputs(triton_llm, **{form: value}), NO_VISION_PREPROCESSOR)


@pytest.mark.triton_llm_entry_models
def test_an_image_of_the_wrong_size_is_one_error(triton_llm, pictures):
    size = image_size(triton_llm) // 2
    wrong = (pixels(pictures[0], size)[np.newaxis, np.newaxis], "FP16")
    with pytest.raises(GenerationError):
        triton_llm.client.request(triton_llm.client.ensemble, inputs(triton_llm, image_input=wrong))
    assert answer(triton_llm, pictures[0]), f"{triton_llm.client.ensemble}: no answer after the refused image"


@pytest.mark.triton_llm_requires("bls_image_kv_keys")
def test_an_images_kv_cache_blocks_are_keyed_by_its_prompt_table_extra_id(triton_llm, pictures):
    """With KV-cache reuse, the client names each image by prompt_table_extra_id (upstream's docs/multimodal.md: the same
    image the same id, from 1): an image's fake prompt ids are the same for every image, and only the id keeps one
    image's blocks from another's. A question long enough to fill a block after the image's rows, through the BLS (the
    multimodal ensemble of v0.19.0 returns no block counts): image B as 2, image A as 1, find no block; each again
    under its id finds the whole block and answers as before; A as 3 finds none."""
    bls = triton_llm.at_entry("tensorrt_llm_bls")
    reuse, why = kv_cache_reuse(triton_llm)
    size, size_from = tokens_per_block(triton_llm)
    if not reuse or size is None:
        pytest.skip(f"{triton_llm.id}: KV-cache blocks are not reused here ({why if not reuse else size_from})")
    question = fresh_prompt(triton_llm.tokenizer, size)  # with LLaVA's prompt and the rows: one whole block and more
    a, b = pictures[:2]
    steps = [("B as 2", b, 2, 0), ("A as 1", a, 1, 0), ("A as 1", a, 1, 1), ("B as 2", b, 2, 1), ("A as 3", a, 3, 0)]
    answers, found = {}, []
    for what, picture, extra_id, _ in steps:
        keyed = inputs(bls, picture, question, prompt_table_extra_id=(np.array([[extra_id]], dtype=np.uint64), "UINT64"))
        outputs = bls.client.request(bls.client.ensemble, keyed | {"return_perf_metrics": (np.array([[True]]), "BOOL")})
        found.append(int(outputs["kv_cache_reused_blocks"].reshape(-1)[0]))
        text = outputs["text_output"].reshape(-1)[0].decode()
        assert answers.setdefault(what, text) == text, f"{what} answered {text!r} after {answers[what]!r}"
    assert found == [want for *_, want in steps], f"blocks found by {[s[0] for s in steps]}: {found}"
