"""The job lease against real catalogs (SQLite, PostgreSQL): one holder, refusal naming it, takeover
after expiry, a holder that finds its lease taken, and two starters racing (one wins)."""

from __future__ import annotations

import threading
import time

import pytest

from router.catalog import load_table
from router.catalog.lease import JobAlreadyRunning, Lease, lease_property
from tests.router.executor.test_partition import catalog_config  # noqa: F401


def test_one_holder_and_a_refusal_that_names_it(catalog_config, unique_name):  # noqa: F811
    table, job = f"{unique_name('l')}.icerouter_jobs", unique_name("job")
    first, second = Lease(catalog_config, table, job, ttl=60), Lease(catalog_config, table, job, ttl=60)
    first.acquire()
    with pytest.raises(JobAlreadyRunning) as refused:
        second.acquire()
    assert refused.value.exit_code == 2
    assert f"job {job!r} is already running (pid " in refused.value.message and " s); stop it first" in refused.value.message
    Lease(catalog_config, table, unique_name("other"), ttl=60).acquire()  # another job name: its own lease
    first.release()
    assert lease_property(job) not in load_table(catalog_config, table, refresh=True).properties
    second.acquire()
    assert second.held
    second.release()


def test_a_crashed_holder_is_taken_over_once_its_lease_expired(catalog_config, unique_name):  # noqa: F811
    table, job = f"{unique_name('l')}.icerouter_jobs", unique_name("job")
    now = time.time()
    crashed = Lease(catalog_config, table, job, ttl=10, clock=lambda: now)
    crashed.acquire()  # and never renews nor releases
    with pytest.raises(JobAlreadyRunning):
        Lease(catalog_config, table, job, ttl=10, clock=lambda: now + 9).acquire()
    successor = Lease(catalog_config, table, job, ttl=10, clock=lambda: now + 11)
    successor.acquire()
    assert crashed.renew() is False and crashed.lost.is_set()  # it woke up: it must stop
    assert successor.renew() is True
    crashed.release()  # releases nothing of the successor's
    assert lease_property(job) in load_table(catalog_config, table, refresh=True).properties
    successor.release()


def test_two_starters_racing_one_wins(catalog_config, unique_name):  # noqa: F811
    table, job = f"{unique_name('l')}.icerouter_jobs", unique_name("job")
    Lease(catalog_config, table, unique_name("warm"), ttl=60).acquire()  # the lease table exists
    leases = [Lease(catalog_config, table, job, ttl=60) for _ in range(4)]
    barrier, outcomes = threading.Barrier(len(leases)), []

    def start(lease: Lease) -> None:
        barrier.wait()
        try:
            lease.acquire()
            outcomes.append("held")
        except JobAlreadyRunning:
            outcomes.append("refused")

    threads = [threading.Thread(target=start, args=(lease,)) for lease in leases]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["held"] + ["refused"] * 3
    assert sum(lease.held for lease in leases) == 1


def test_a_holder_whose_process_is_gone_on_this_host_is_taken_over_at_once(catalog_config, unique_name,  # noqa: F811
                                                                         tmp_path):
    import json
    import subprocess
    import sys

    table, job = f"{unique_name('l')}.icerouter_jobs", unique_name("job")
    crashed = subprocess.run([sys.executable, "-c", (
        "import json, os, sys\n"
        "from router.config import CatalogConfig\n"
        "from router.catalog.lease import Lease\n"
        f"Lease(CatalogConfig(**json.loads({json.dumps(json.dumps({'name': catalog_config.name, 'properties': dict(catalog_config.properties)}))})), "
        f"{table!r}, {job!r}, ttl=600).acquire()\n"
        "os._exit(0)  # dies holding the lease\n")], capture_output=True, text=True, timeout=120)
    assert crashed.returncode == 0, crashed.stderr
    lease = Lease(catalog_config, table, job, ttl=600)
    lease.acquire()  # the lease has 600 s to run, but its holder's pid is gone
    assert lease.held
    lease.release()
