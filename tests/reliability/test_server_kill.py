"""SIGKILL of the REST server under write load loses no acknowledged write and corrupts nothing."""

import http.client
import random
import threading
import time

from tests.reliability.conftest import LONG

KILLS = 30 if LONG else 5
WRITERS = 3
FACT_KEYS = 4


def writer(
    instance, number: int, stop: threading.Event, acknowledged: list, refused: list, lock
) -> None:
    sequence = 0
    while not stop.is_set():
        sequence += 1
        value = f"writer {number} value {sequence}"
        body = {
            "profile_name": "user",
            "kind": "preference",
            "predicate": f"setting_{sequence % FACT_KEYS}",
            "value": value,
        }
        try:
            status, answer = instance.request("POST", "/api/v1/facts", body, timeout=10)
        except (OSError, http.client.HTTPException):
            # The server is down, or died mid-answer (IncompleteRead): never acknowledged. A writer
            # that stopped here would leave the rest of the kills with fewer writers.
            time.sleep(0.05)
            continue
        with lock:
            if status == 200:
                acknowledged.append((answer["id"], value))
            else:
                refused.append((status, answer))


def test_it_loses_no_acknowledged_write_when_the_server_is_killed(instance, record_property):
    acknowledged: list[tuple[int, str]] = []
    refused: list[tuple[int, dict]] = []
    lock = threading.Lock()
    rng = random.Random(12)
    kills = 0
    for _ in range(KILLS):
        instance.start()
        stop = threading.Event()
        threads = [
            threading.Thread(target=writer, args=(instance, n, stop, acknowledged, refused, lock))
            for n in range(WRITERS)
        ]
        for thread in threads:
            thread.start()
        before = len(acknowledged)
        deadline = time.monotonic() + 60
        while len(acknowledged) == before and time.monotonic() < deadline:
            time.sleep(0.05)  # the first writes after a start load the tokenizer
        time.sleep(rng.uniform(0.2, 1.0))
        instance.kill()  # mid-write: requests are in flight
        kills += 1
        stop.set()
        for thread in threads:
            thread.join(timeout=30)

    stored = dict(
        instance.sql(
            "SELECT m.id, f.value FROM memory_fact f JOIN memory_memory m ON m.id = f.memory_ptr_id"
        )
    )
    lost = [(pk, value) for pk, value in acknowledged if stored.get(pk) != value]
    integrity = instance.sql("PRAGMA integrity_check")
    current_per_key = instance.sql(
        "SELECT f.predicate, COUNT(*) FROM memory_fact f JOIN memory_memory m "
        "ON m.id = f.memory_ptr_id WHERE m.status = 'active' GROUP BY f.predicate"
    )
    record_property("kills", kills)
    record_property("acknowledged", len(acknowledged))
    record_property("lost", len(lost))
    print(
        f"server kills survived: {kills}, acknowledged writes: {len(acknowledged)}, lost: {len(lost)}"
    )

    assert kills == KILLS and len(acknowledged) >= KILLS
    assert lost == [] and refused == []
    assert integrity == [("ok",)]
    assert sorted(current_per_key) == [(f"setting_{n}", 1) for n in range(FACT_KEYS)]
