"""Drives the Python client against a real fleet (TestClientsAgainstAFleet).

Usage: drive.py BASE_URL TOKEN PREFIX TYPE OPERATOR_TOKEN. Schedules about
1,000 tasks of every kind through leasecron_client, checks what the API
answers on the way (duplicates refused, unique keys held, cancel,
idempotent retries, a bulk cancel started twice with its id), and prints
one JSON line: what the Go test then checks ran.
"""

import json
import sys
import time

from leasecron_client import Client, Conflict, UniqueKeyHeld


def main() -> None:
    base, token, p, typ, op_token = sys.argv[1:6]
    lc = Client(base, token, timeout=60.0)
    out = {"ran": [], "cancelled": [], "pairs": [], "batch": p + "batch", "series": p + "r", "checks": 0}

    def check(cond, what):
        if not cond:
            raise SystemExit("check failed: " + what)
        out["checks"] += 1

    # 800 one-offs in two requests, due within 10 s.
    for half in range(2):
        tasks = [{"id": f"{p}m-{half * 400 + i:03d}", "type": typ, "in": f"{(i % 20) / 2}s", "payload": {"n": i}}
                 for i in range(400)]
        res = lc.schedule_many(tasks)
        check(res["scheduled"] == 400, f"schedule_many scheduled {res['scheduled']} of 400")
        out["ran"] += [t["id"] for t in tasks]
    # A batch of 100 with a completion callback.
    tasks = [{"id": f"{p}b-{i:03d}", "type": typ, "in": "1s"} for i in range(100)]
    res = lc.schedule_many(tasks, batch=out["batch"], on_complete={"type": typ, "payload": "batch done"})
    check(res["scheduled"] == 100 and res.get("batch") == out["batch"], f"batch: {res}")
    out["ran"] += [t["id"] for t in tasks]
    # 40 single schedules, and a retried identical POST answers the same.
    for i in range(40):
        task = lc.schedule(typ, {"single": i}, id=f"{p}s-{i:02d}", in_="2s")
        check(task["id"] == f"{p}s-{i:02d}", f"schedule answered {task}")
        out["ran"].append(task["id"])
    again = lc.schedule(typ, {"single": 0}, id=f"{p}s-00", in_="2s")
    check(again["id"] == f"{p}s-00", "an identical retry answers the task")
    try:
        lc.schedule(typ, {"single": "other"}, id=f"{p}s-01", in_="2s")
        check(False, "the same id with another body was accepted")
    except Conflict as e:
        check(not isinstance(e, UniqueKeyHeld), "a plain conflict")
    # 20 unique keys: a second task with the key is refused, naming the holder.
    for i in range(20):
        lc.schedule(typ, id=f"{p}u-{i:02d}", in_="3s", unique_key=f"{p}key-{i:02d}")
        out["ran"].append(f"{p}u-{i:02d}")
        try:
            lc.schedule(typ, id=f"{p}u2-{i:02d}", unique_key=f"{p}key-{i:02d}")
            check(False, "a held unique key was taken")
        except UniqueKeyHeld as e:
            check(e.holder == f"{p}u-{i:02d}", f"holder {e.holder}")
    # 20 pairs: a child after its parent.
    for i in range(20):
        parent, child = f"{p}p-{i:02d}", f"{p}c-{i:02d}"
        lc.schedule(typ, id=parent, in_="1s")
        lc.schedule(typ, id=child, after=[parent])
        out["ran"] += [parent, child]
        out["pairs"].append([parent, child])
    # 10 cancelled before they are due: status and cancel agree.
    for i in range(10):
        tid = f"{p}x-{i:02d}"
        lc.schedule(typ, id=tid, in_="1h")
        st = lc.status(tid)
        check(st["state"] == "scheduled", f"status before cancel: {st}")
        res = lc.cancel(tid)
        check(res["removed"], f"cancel: {res}")
        out["cancelled"].append(tid)
    # 5 cancelled by one bulk operation, its start sent twice with its id:
    # the second finds the first's operation and starts nothing.
    ops = Client(base, op_token, timeout=60.0)
    ids = [f"{p}k-{i}" for i in range(5)]
    for tid in ids:
        lc.schedule(typ, id=tid, in_="1h")
    bid = f"bulk-{p}cancel"
    for send in range(2):
        b = ops.start_bulk("cancel-pending", expect=5, id=bid, type=typ, id_prefix=f"{p}k-")
        check(b["id"] == bid, f"bulk send {send + 1}: {b}")
    deadline = time.monotonic() + 120
    while (b := ops.bulk(bid))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
    check(b["state"] == "succeeded" and b["done"] == 5, f"bulk: {b}")
    check(sum(o["id"] == bid for o in ops.bulks()["operations"]) == 1, "one operation of the id")
    out["cancelled"] += ids
    # One series, every second.
    lc.schedule(typ, id=out["series"], every="1s")
    # Wait for one of them to finish, through the client.
    st = lc.wait(f"{p}s-39", timeout=120)
    check(st["run"]["state"] == "succeeded", f"wait: {st}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
