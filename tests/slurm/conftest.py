"""A real single-node Slurm (slurmctld + slurmd + munged on 127.0.0.1) for the Slurm tests.

The cluster is brought up once per session by :func:`slurm_cluster` and stopped at its
end (see :mod:`tests.slurm.cluster`). Without the daemons the tests FAIL with the
command that installs them: a missing Slurm must never pass as a skipped test
(``make test`` and ``.ci/run`` install them when they can).
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import INSTALL_HINT, LocalSlurm, missing_daemons, start


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[LocalSlurm]:
    """The running cluster; ``cluster.env`` has ``SLURM_CONF`` for clients and engines."""
    missing = missing_daemons()
    if missing:
        pytest.fail(f"the Slurm tests need {', '.join(missing)}: {INSTALL_HINT}",
                    pytrace=False)
    # /tmp, not pytest's tmp_path: the munge socket's path must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="dltop-slurm-"))
    cluster = start(root)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm_env(slurm_cluster: LocalSlurm, monkeypatch: pytest.MonkeyPatch) -> LocalSlurm:
    """The cluster, with ``SLURM_CONF`` set (and no outer job's ``SLURM_JOB_ID``) here."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    return slurm_cluster
