"""Scrape ``dltop exporter`` with a real Prometheus and run the Grafana dashboard's queries.

Not part of the test suite (it needs the ``prometheus`` binary: ``apt-get install
prometheus`` on Debian). It stores a small campaign (a running run in precision bf16,
an ok and a crashed run in fp32, one job queued; the campaign waiting for a GPU: the one
tests/telemetry/test_campaign_metrics.py checks, tests/telemetry/metrics_campaign.py), starts
``dltop exporter --fake-gpus 2`` on it and a Prometheus that scrapes it every second,
then asks Prometheus (HTTP API) for every query of docs/grafana/dltop-campaign.json and
prints how many series each returns. Exit 1 when a query returns nothing or Prometheus
reports the target down.

    PYTHONPATH=src python scripts/prometheus_check.py [--prometheus /usr/bin/prometheus]
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "grafana" / "dltop-campaign.json"
sys.path.insert(0, str(ROOT))
from tests.telemetry.metrics_campaign import seed  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def query(port: int, expr: str) -> list[Any]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as resp:
        doc = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="dltop-prom-"))
    engine = subprocess.Popen(["sleep", "600"])
    procs: list[subprocess.Popen[bytes]] = [engine]
    try:
        seed(work / "d.db", engine.pid)
        exp_port, prom_port = free_port(), free_port()
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dltop", "exporter", "--db", str(work / "d.db"),
             "--fake-gpus", "2", "--port", str(exp_port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        (work / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "scrape_configs:\n  - job_name: dltop\n    static_configs:\n"
            f"      - targets: ['127.0.0.1:{exp_port}']\n")
        procs.append(subprocess.Popen(
            [args.prometheus, f"--config.file={work / 'prometheus.yml'}",
             f"--storage.tsdb.path={work / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=subprocess.DEVNULL, stderr=open(work / "prometheus.log", "wb")))  # noqa: SIM115
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if any(r["value"][1] == "1" for r in query(prom_port, 'up{job="dltop"}')):
                    break
            except OSError:
                pass
            time.sleep(1)
        else:
            print("Prometheus never saw the exporter up", file=sys.stderr)
            return 1
        time.sleep(3)  # a few scrapes
        dash = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", ())]
        failed = serve = 0
        for expr in exprs:
            got = query(prom_port, expr.replace('"$campaign"', '".*"')
                        .replace('"$host"', '".*"'))
            # this campaign has no serve run: those queries are only checked to parse
            # (their series: tests/telemetry/test_grafana_live.py, on a live serve run)
            if "dltop_serve_" in expr or " and on " in expr:  # ... nor a pause asked
                serve += 1
                print(f"{len(got):3d} series  {expr}  (parsed; nothing to show here)")
                continue
            failed += not got
            print(f"{len(got):3d} series  {expr}")
        print(f"Prometheus {args.prometheus}: {len(exprs) - serve - failed}/"
              f"{len(exprs) - serve} dashboard queries return series; {serve} more "
              "(serve runs, pausing) parsed")
        return 1 if failed else 0
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
