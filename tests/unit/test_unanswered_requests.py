"""The request readers: a stream that gets no final response is cancelled when it gives up, and a batched request
unanswered past its timeout is an error, so that a stalled or crashed server fails the request instead of hanging the
session."""

import pytest

from pytest_triton_llm.triton.streaming import StreamError, grpc_stream


class SilentClient:
    """A server that takes the request and never answers (tensorrtllm_backend#457's stalled engine)."""

    def __init__(self):
        self.stops: list[bool] = []

    def start_stream(self, callback, headers=None):
        pass

    def async_stream_infer(self, *args, **kwargs):
        pass

    def stop_stream(self, cancel_requests=False):
        self.stops.append(cancel_requests)

    def close(self):
        pass


class Endpoints:
    def __init__(self, client):
        self.client = client

    def grpc_client(self):
        return self.client

    def header_dict(self):
        return {}


def test_a_stream_that_times_out_is_cancelled_not_waited_for():
    client = SilentClient()
    with pytest.raises(StreamError, match="no final response after"):
        grpc_stream(Endpoints(client), "tensorrt_llm", [], timeout_s=0.05)
    assert client.stops == [True]


def test_a_stream_cancelled_on_purpose_is_closed_once_more_without_cancelling_again():
    client = SilentClient()
    result = grpc_stream(Endpoints(client), "tensorrt_llm", [], cancel_after_s=0.02, timeout_s=5)
    assert result.cancelled and client.stops == [True, False]


def test_a_batched_request_that_gets_no_answer_is_an_error_after_its_timeout():
    import asyncio

    from pytest_triton_llm.triton.load import _bounded

    async def never(index, inputs):
        await asyncio.sleep(3600)

    record = asyncio.run(_bounded(never, 0.05)(0, {}))
    assert record.error == "no answer after 0 s" and record.done is not None
