"""A local OpenLineage receiver (what Marquez's /api/v1/lineage takes) and the checks of a live
job's events: each validated against the spec's schemas, the datasets against the routes."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from router.lineage.naming import kafka_namespace
from tests.router.lineage.schema import validate_event


class LineageReceiver:
    """http.server on 127.0.0.1; `events` in the order they arrived."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        events = self.events

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path.rstrip("/") == "/api/v1/lineage":
                    events.append(json.loads(body))
                    self.send_response(201)
                else:
                    self.send_response(404)
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def check_job_lineage(events: list[dict], job: str, bootstrap: str, topics: list[str],
                      sources: dict[str, set[str]], dlq: str) -> None:
    """The job's run: START first and COMPLETE last, one run id; inputs the config's topics named as
    the spec names Kafka; outputs the routes' tables (and the dead-letter table), each table's column
    lineage from exactly the topics whose routes feed it; `dlq replay` a run of its own."""
    assert events, "no lineage event arrived"
    for event in events:
        validate_event(event)
    text = json.dumps(events)
    assert "sasl" not in text.lower() and "password" not in text.lower()
    runs = [e for e in events if e["job"]["name"] == job]
    assert [runs[0]["eventType"], runs[-1]["eventType"]] == ["START", "COMPLETE"], [e["eventType"] for e in runs]
    assert {e["eventType"] for e in runs[1:-1]} <= {"RUNNING"}
    assert len({e["run"]["runId"] for e in runs}) == 1
    namespace = kafka_namespace(bootstrap)
    for event in runs:
        assert all(d["namespace"] == namespace for d in event["inputs"])
        assert {d["name"] for d in event["inputs"]} <= set(topics)
    start, end = runs[0], runs[-1]
    assert {d["name"] for d in start["inputs"]} == set(topics)
    assert {d["name"] for d in start["outputs"]} == set(sources) | {dlq}
    outputs = {d["name"]: d for d in end["outputs"]}
    assert set(outputs) == set(sources) | {dlq}
    for table, fed_by in sources.items():
        facets = outputs[table]["facets"]
        assert facets["catalog"]["framework"] == "iceberg"
        columns = {f["name"] for f in facets["schema"]["fields"]}
        assert {"_kafka_topic", "_kafka_offset"} <= columns
        lineage = facets["columnLineage"]["fields"]
        assert set(lineage) == columns
        for column in lineage.values():
            assert {(f["namespace"], f["name"]) for f in column["inputFields"]} == {(namespace, t) for t in fed_by}
    created = [d for e in runs for d in e["outputs"] if "icerouter_schemaChange" in d.get("facets", {})]
    assert {d["name"] for d in created} >= set(sources), "each table's creation is a schema change event"
    fan_out = [t for t in topics if sum(t in fed for fed in sources.values()) > 1]
    fan_in = [table for table, fed in sources.items() if len(fed) > 1]
    assert fan_out and fan_in, "the routes hold a fan-out and a fan-in"
    replays = [e for e in events if e["job"]["name"] == f"{job}.dlq_replay"]
    assert [e["eventType"] for e in replays] == ["START", "COMPLETE"]
    assert [d["name"] for d in replays[0]["inputs"]] == [dlq]
