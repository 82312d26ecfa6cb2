"""benchmarks/serve_client.py (issue 41): its fake server's schedule, the peer's (AIPerf)
export parsed, and one short run of dltop's side against the real fake server."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _bench(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


fake = _bench("serve_fake")
client = _bench("serve_client")
ladder = _bench("serve_ladder")
peer = _bench("serve_peer")


def test_schedule_first_token_then_a_chunk_every_gap_the_last_chunk_the_rest() -> None:
    assert fake.chunk_schedule(20.0, 4.0, 3, 1) == pytest.approx(
        [(0.020, 1), (0.024, 1), (0.028, 1)])
    plan = fake.chunk_schedule(10.0, 5.0, 8, 3)
    assert [k for _, k in plan] == [3, 3, 2]
    assert [t for t, _ in plan] == pytest.approx([0.010, 0.015, 0.020])
    assert fake.chunk_schedule(10.0, 5.0, 1, 4) == pytest.approx([(0.010, 1)])


def test_aiperf_export_read_for_p50s_and_refused_without_them() -> None:
    doc = {"time_to_first_token": {"unit": "ms", "avg": 21.0, "p50": 20.5, "p99": 30.0},
           "inter_token_latency": {"unit": "ms", "avg": 4.1, "p50": 4.02},
           "request_count": {"unit": "requests", "avg": 200.0}}
    assert peer.parse_aiperf(doc) == (20.5, 4.02, 200)
    with pytest.raises(ValueError, match="no inter_token_latency"):
        peer.parse_aiperf({k: v for k, v in doc.items() if k != "inter_token_latency"})
    with pytest.raises(ValueError, match="no p50 in ms"):
        peer.parse_aiperf({**doc, "time_to_first_token": {"unit": "s", "p50": 0.02}})


def test_nearest_rank_percentile() -> None:
    values = [float(i) for i in range(1, 101)]
    assert client.percentile(values, 99) == 99.0
    assert client.percentile(values, 50) == 50.0
    assert client.percentile([3.0], 99) == 3.0


def test_the_ladder_doubles_then_bisects_and_sizes_each_step_for_a_p99() -> None:
    asked: list[tuple[float, int]] = []

    def client_holding(limit: float):  # lag 1 ms up to ``limit``/s, 5 ms above
        def run(rate: float, n: int) -> tuple[float, float, int, float]:
            asked.append((rate, n))
            return (1.0 if rate <= limit else 5.0), rate, 1, 100.0
        return run

    steps, held = ladder.ladder("t", client_holding(37.0), 5.0, 4.0, 3, 1.0, 2000.0,
                                floor=lambda rate, n: 0.0)
    assert [s.rate_per_s for s in steps] == [5, 10, 20, 40, 30, 35, 37.5]
    assert held == 35.0 and [s.held for s in steps][-1] is False
    # at least 100 requests (a p99, the percentile rule), or 4 s of arrivals
    assert [n for _, n in asked] == [100, 100, 100, 160, 120, 140, 150]
    # not held at the start: halving down to the lowest rate held, then bisecting
    steps, held = ladder.ladder("t", client_holding(1.5), 5.0, 4.0, 1, 1.0, 2000.0,
                                floor=lambda rate, n: 0.0)
    assert [s.rate_per_s for s in steps] == [5, 2.5, 1.25, 1.875] and held == 1.25
    steps, held = ladder.ladder("t", client_holding(0.1), 5.0, 4.0, 3, 2.0, 2000.0,
                                floor=lambda rate, n: 0.0)
    assert [s.rate_per_s for s in steps] == [5, 2.5] and held is None


@pytest.mark.slow  # starts the fake server and dltop's runner: a few seconds
def test_the_fake_server_streams_its_schedule_and_counts_chunks() -> None:
    proc = subprocess.Popen([sys.executable, str(BENCH / "serve_fake.py"), "--ttft-ms",
                             "5", "--itl-ms", "1", "--tokens-per-chunk", "2"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        base = f"http://127.0.0.1:{int(proc.stdout.readline().split()[1])}"
        body = json.dumps({"model": "m", "max_tokens": 5, "stream": True,
                           "messages": [{"role": "user", "content": "a b c"}]}).encode()
        req = urllib.request.Request(base + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            events = [line[6:] for line in resp.read().decode().splitlines()
                      if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        objs = [json.loads(e) for e in events[:-1]]
        assert objs[0]["choices"][0]["delta"] == {"role": "assistant"}
        texts = [o["choices"][0]["delta"]["content"] for o in objs[1:-1]]
        assert texts == ["tok tok ", "tok tok ", "tok "]
        assert objs[-1]["usage"] == {"prompt_tokens": 3, "completion_tokens": 5,
                                     "total_tokens": 8}
        with urllib.request.urlopen(base + "/stats", timeout=10) as resp:
            stats = json.loads(resp.read())
        assert stats["requests"] == 1 and stats["chunks"] == 3
        assert stats["last_mono"] - stats["first_mono"] >= 0.007  # 5 ms + 2 gaps of 1
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow  # the benchmark end to end, dltop's side only: about 10 s
def test_benchmark_without_peer_prints_dltops_figures_and_why_no_peer() -> None:
    res = subprocess.run([sys.executable, str(BENCH / "serve_client.py"), "--no-peer",
                          "--rounds", "1", "--requests", "6", "--warmup", "1",
                          "--new-tokens", "8", "--no-sweep"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (cpu,) = [line for line in res.stdout.splitlines()
              if line.startswith("client CPU per chunk")]
    assert float(cpu.split()[5]) > 0, res.stdout
    assert "peer not compared: --no-peer" in res.stdout
