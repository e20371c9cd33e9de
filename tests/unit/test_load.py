"""The closed-loop load of the batching suite: every job once, at most `concurrency` at a time, ramped starts."""

import threading
import time

from pytest_triton_llm.load import closed_loop, mixed_lengths


def test_mixed_lengths_are_seeded_and_within_bounds():
    lengths = mixed_lengths(48, 8, 128)
    assert lengths == mixed_lengths(48, 8, 128)
    assert lengths != mixed_lengths(48, 8, 128, seed=1)
    assert all(8 <= n <= 128 for n in lengths)


class Server:
    """A fake send(): holds each request briefly and remembers how many were in flight at once."""

    def __init__(self, hold_s: float = 0.02):
        self.hold_s = hold_s
        self.lock = threading.Lock()
        self.in_flight = self.most_in_flight = 0
        self.seen: list[int] = []
        self.starts: list[float] = []

    def send(self, job: int) -> int:
        with self.lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.seen.append(job)
            self.starts.append(time.perf_counter())
        time.sleep(self.hold_s)
        with self.lock:
            self.in_flight -= 1
        return job


def test_every_job_is_sent_once_by_at_most_concurrency_clients():
    server = Server()
    result = closed_loop(server.send, list(range(1, 41)), concurrency=4)
    assert sorted(server.seen) == list(range(1, 41))
    assert server.most_in_flight == 4
    assert result.requests == 40 and result.output_tokens == sum(range(1, 41)) and len(result.latencies_s) == 40


def test_staggered_clients_send_their_first_requests_one_stagger_apart():
    server = Server(hold_s=0.3)  # longer than the ramp: each client's first request is one of the four
    begin = time.perf_counter()
    closed_loop(server.send, list(range(4)), concurrency=4, stagger_s=0.05)
    offsets = sorted(t - begin for t in server.starts)
    assert all(offset >= 0.05 * i for i, offset in enumerate(offsets)), offsets
