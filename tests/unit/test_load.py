"""The load engine's closed loop: every request once, at most `concurrency` in flight, ramped starts;
mixed output lengths for the batching suite."""

import asyncio
import time

from pytest_triton_llm.triton.load import RequestRecord, _closed_loop, arrival_offsets
from pytest_triton_llm.perf.workload import mixed_lengths


def test_mixed_lengths_are_seeded_and_within_bounds():
    lengths = mixed_lengths(48, 8, 128)
    assert lengths == mixed_lengths(48, 8, 128)
    assert lengths != mixed_lengths(48, 8, 128, seed=1)
    assert all(8 <= n <= 128 for n in lengths)


class Server:
    """A fake sender: holds each request briefly and remembers how many were in flight at once."""

    def __init__(self, hold_s: float = 0.02):
        self.hold_s = hold_s
        self.in_flight = self.most_in_flight = 0
        self.seen: list[int] = []
        self.starts: list[float] = []

    async def send(self, index: int, inputs: dict) -> RequestRecord:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        self.seen.append(inputs["n"])
        self.starts.append(time.perf_counter())
        record = RequestRecord(index, time.perf_counter(), tokens=inputs["n"])
        await asyncio.sleep(self.hold_s)
        self.in_flight -= 1
        record.done = time.perf_counter()
        return record


def test_every_request_is_sent_once_by_at_most_concurrency_clients():
    server = Server()
    records = asyncio.run(_closed_loop(server.send, [{"n": n} for n in range(1, 41)], 4, None, 0.0))
    assert sorted(server.seen) == list(range(1, 41))
    assert server.most_in_flight == 4
    assert sorted(r.index for r in records) == list(range(40)) and sum(r.tokens for r in records) == sum(range(1, 41))


def test_staggered_clients_send_their_first_requests_one_stagger_apart():
    server = Server(hold_s=0.3)  # longer than the ramp: each client's first request is one of the four
    begin = time.perf_counter()
    asyncio.run(_closed_loop(server.send, [{"n": n} for n in range(4)], 4, None, 0.05))
    offsets = sorted(t - begin for t in server.starts)
    assert all(offset >= 0.05 * i for i, offset in enumerate(offsets)), offsets


def test_arrival_offsets_are_seeded_increasing_and_constant_when_asked():
    poisson = arrival_offsets(100, 50.0, "poisson", 1)
    assert poisson == arrival_offsets(100, 50.0, "poisson", 1) != arrival_offsets(100, 50.0, "poisson", 2)
    assert all(b > a for a, b in zip(poisson, poisson[1:], strict=False))
    assert arrival_offsets(4, 2.0, "constant", 0) == [0.5, 1.0, 1.5, 2.0]
