"""``python -m scaleout``: the scale-out scenarios on real hosts, written to SCALEOUT.md.

Every scenario runs against :mod:`scaleout.topology` (a bundle server, replicas on the
embedded engine and with an OPA sidecar, a client host) and counts what matters: calls
made, calls run that the policy in force did not allow (must be 0), calls a replica
acknowledged as run that are missing from its audit trail (must be 0), and how long a
policy rollout takes to reach every replica, its cache included.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from scaleout.topology import (
    GATEWAY_PORT,
    POLL_S,
    ROOT,
    SEARCH,
    Replica,
    Topology,
    build,
    start_replica,
)

#: What a reader's ``add`` call answers while the grant is in force, and once revoked.
ALLOWED: Final = 200
DENIED: Final = 403
PROBE_S: Final = 0.05
CONVERGE_S: Final = 60.0
HOLD_S: Final = 3 * POLL_S + 2


def expected(granted: bool) -> int:
    return ALLOWED if granted else DENIED


def converge(topology: Topology, granted: bool, since: float) -> dict[str, float]:
    """Seconds from ``since`` until each replica answers as the published revision says."""
    want = expected(granted)
    done: dict[str, float] = {}
    deadline = since + CONVERGE_S
    probe = 0
    while len(done) < len(topology.replicas) and time.monotonic() < deadline:
        for replica in topology.replicas:
            if replica.host.name in done:
                continue
            probe += 1
            if topology.call(replica, f"probe-{probe}") == want:
                done[replica.host.name] = time.monotonic() - since
        time.sleep(PROBE_S)
    missing = [r.host.name for r in topology.replicas if r.host.name not in done]
    if missing:
        raise RuntimeError(f"no convergence in {CONVERGE_S} s on {missing}")
    return done


def hold(topology: Topology, granted: bool, seconds: float) -> dict[str, int]:
    """Probe every replica for ``seconds``; count answers that are not the last good one."""
    want = expected(granted)
    calls = wrong = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for replica in topology.replicas:
            calls += 1
            status = topology.call(replica, f"hold-{calls}")
            # A run call under a revoked grant is an unauthorized execution; a refusal under
            # a grant is a wrong answer too (the last good revision must stay in force).
            wrong += status != want
        time.sleep(PROBE_S)
    return {"calls": calls, "wrong": wrong}


def scenario_rollouts(topology: Topology, repeats: int) -> dict[str, Any]:
    """Alternate revoking and granting ``add``; time each rollout to the last replica."""
    built = [topology.make_bundles(f"r{i}", grant=i % 2 == 0) for i in range(1, repeats + 1)]
    per_rollout: list[dict[str, Any]] = []
    for index, bundle in enumerate(built, start=1):
        granted = index % 2 == 0
        for replica in topology.replicas:  # the decision is in every replica's cache
            topology.call(replica, f"warm-{index}")
        since = topology.publish(bundle)
        times = converge(topology, granted, since)
        per_rollout.append({"revision": bundle.name, "granted": granted, "seconds": times})
    slowest = [max(r["seconds"].values()) for r in per_rollout]
    return {
        "rollouts": per_rollout,
        "median_s": statistics.median(slowest),
        "max_s": max(slowest),
        "granted": per_rollout[-1]["granted"] if per_rollout else True,
    }


def scenario_wrong_key(topology: Topology, granted: bool) -> dict[str, Any]:
    """A bundle signed with another key, flipping the grant, changes nothing anywhere."""
    forged = topology.make_bundles("forged", grant=not granted, key=topology.wrong_key)
    topology.publish(forged)
    result = hold(topology, granted, HOLD_S)
    return {"what": "bundle signed with the wrong key, flipping the grant", **result}


def scenario_outage(topology: Topology, granted: bool, how: str) -> dict[str, Any]:
    """The bundle server stops (or its host's link goes down): nothing changes meanwhile."""
    if how == "server stopped":
        topology.stop_bundle_server()
    else:
        topology.bundle_host.link_down()
    try:
        result = hold(topology, granted, HOLD_S)
    finally:
        if how == "server stopped":
            topology.start_bundle_server()
        else:
            topology.bundle_host.link_up()
    return {"what": f"bundle server outage ({how})", **result}


def scenario_recovery(topology: Topology, granted: bool) -> dict[str, Any]:
    """After an outage, a new revision reaches every replica again."""
    bundle = topology.make_bundles("after-outage", grant=not granted)
    since = topology.publish(bundle)
    times = converge(topology, not granted, since)
    return {"what": "rollout after the outage", "seconds": times, "granted": not granted}


def scenario_redis(topology: Topology, how: str) -> dict[str, Any]:
    """Redis cut off (link down) or stalled (SIGSTOP) while every replica is called.

    Calls that need state must fail closed on every replica (503 ``state_unavailable``);
    calls that do not must run.
    """
    if how == "link down":
        topology.redis_host.link_down()
    elif topology.redis is not None:
        topology.redis.send_signal(signal.SIGSTOP)
    calls = wrong = unauthorized = 0
    try:
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            for replica in topology.replicas:
                calls += 2
                stateful = topology.call(replica, f"state-{calls}")
                unauthorized += stateful == ALLOWED  # it ran without the state it needs
                wrong += stateful != 503
                wrong += topology.call(replica, f"search-{calls}", call=SEARCH) != ALLOWED
    finally:
        if how == "link down":
            topology.redis_host.link_up()
        elif topology.redis is not None:
            topology.redis.send_signal(signal.SIGCONT)
    back = converge_call(topology)
    return {
        "what": f"Redis {how}: calls needing state fail closed, the others run",
        "calls": calls,
        "wrong": wrong,
        "unauthorized": unauthorized,
        "back_s": back,
    }


def _opa_decisions(replica: Replica) -> int:
    # How many decisions the sidecar has been asked (its own Prometheus counter).
    done = replica.host.run(
        ["curl", "-s", "-m", "10", "http://127.0.0.1:8181/metrics"], capture_output=True, text=True
    )
    total = 0
    for line in done.stdout.splitlines():
        counted = line.startswith("http_request_duration_seconds_count")
        if counted and 'handler="v1/data"' in line and 'method="post"' in line:
            total += int(float(line.rsplit(" ", 1)[1]))
    return total


def scenario_sidecar_link(topology: Topology, calls: int = 30) -> dict[str, Any]:
    """The link to the OPA sidecar made slow and lossy (a token bucket on its loopback).

    Decisions that miss the deadline fail closed (503), and the gateway never asks again
    for the same call (no retry storm): OPA is asked at most once per call.
    """
    replica = next(r for r in topology.replicas if r.engine == "opa")
    before = _opa_decisions(replica)
    replica.host.limit_loopback("8kbit")
    statuses: dict[int, int] = {}
    try:
        for index in range(calls):
            # Arguments of their own: every call is a decision, never a cache hit.
            call = {"name": "search", "arguments": {"tenant": "acme", "query": f"q{index}"}}
            status = topology.call(replica, f"slow-{index}", timeout_s=10, call=call)
            statuses[status] = statuses.get(status, 0) + 1
    finally:
        replica.host.limit_loopback(None)
    asked = _opa_decisions(replica) - before
    return {
        "what": "OPA sidecar link slow and lossy (tc tbf on the replica's loopback)",
        "calls": calls,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "wrong": sum(v for k, v in statuses.items() if k not in (ALLOWED, 503)),
        "opa_asked": asked,
    }


def converge_call(topology: Topology) -> float:
    """Seconds until every replica runs a call that needs state again."""
    since = time.monotonic()
    pending = set(range(len(topology.replicas)))
    probe = 0
    while pending and time.monotonic() < since + CONVERGE_S:
        for index in sorted(pending):
            probe += 1
            if topology.call(topology.replicas[index], f"back-{probe}") == ALLOWED:
                pending.discard(index)
        time.sleep(PROBE_S)
    if pending:
        raise RuntimeError("state did not come back")
    return time.monotonic() - since


def _decision_ids(trail: Path) -> set[str]:
    ids = set()
    for path in sorted(trail.parent.glob(trail.name + "*")):
        if path.suffix in {".head", ".lock"}:
            continue
        for line in path.read_bytes().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill: not a record
            if record.get("type") == "decision" and record.get("result") == "allow":
                ids.add(record["call_id"])
    return ids


def scenario_kill(topology: Topology, replica: Replica, granted: bool) -> dict[str, Any]:
    """Kill a replica (SIGKILL) under load: every call it answered as run is in its trail."""
    if not granted:
        raise RuntimeError("the kill scenario needs the grant in force")
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = [0]

    def load(worker: int) -> None:
        n = 0
        while not stop.is_set():
            n += 1
            call_id = f"kill-{worker}-{n}"
            with lock:
                sent[0] += 1
            if topology.call(replica, call_id, timeout_s=2) == ALLOWED:
                with lock:
                    acknowledged.append(call_id)

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(load, worker) for worker in range(8)]
        deadline = time.monotonic() + 30
        while len(acknowledged) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        if replica.process is None:
            raise RuntimeError(f"{replica.host.name} is not running")
        replica.process.send_signal(signal.SIGKILL)
        replica.process.wait(timeout=10)
        time.sleep(0.5)
        stop.set()
        for future in futures:
            future.result()
    recorded = _decision_ids(replica.trail)
    missing = sorted(set(acknowledged) - recorded)
    start_replica(topology, replica)
    verified = subprocess.run(
        [sys.executable, "-m", "gateway", "audit", "verify", "--config",
         str(replica.folder / "gateway.toml")],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    return {
        "what": f"{replica.host.name} killed (SIGKILL) under load",
        "calls": sent[0],
        "acknowledged": len(acknowledged),
        "missing_from_trail": len(missing),
        "trail_verifies_after_restart": verified.returncode == 0,
    }


def collect(topology: Topology, into: Path, trails: dict[str, Path] | None = None) -> Path:
    """Copy every replica's chain (or the given trail folders) into one folder."""
    into.mkdir(parents=True, exist_ok=True)
    for replica in topology.replicas:
        folder = (trails or {}).get(replica.host.name, replica.trail.parent)
        for path in sorted(folder.iterdir()):
            if path.name.startswith("audit.jsonl") and not path.name.endswith(".lock"):
                target = path.name.replace("audit", replica.host.name, 1)
                shutil.copyfile(path, into / target)
    return into


def verify_collected(topology: Topology, folder: Path) -> subprocess.CompletedProcess[str]:
    """``gateway audit verify`` of a folder of chains, against the replicas' anchor log."""
    return subprocess.run(
        [sys.executable, "-m", "gateway", "audit", "verify",
         "--key-file", str(topology.work / "audit.key"),
         "--anchors", str(topology.work / "anchors" / "anchors.jsonl"), str(folder)],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip


def scenario_collected_trails(topology: Topology) -> dict[str, Any]:
    """Verify the chains collected in one folder, also with one deleted or rolled back.

    Against the anchor log: intact, after one replica's whole chain was deleted, and with
    replica2's trail replaced by an older copy of itself (which verifies on its own).
    """
    older = topology.work / "older-replica2"
    shutil.copytree(topology.replicas[1].trail.parent, older)
    for index in range(20):  # replica2 goes on past that copy, and anchors its new head
        topology.call(topology.replicas[1], f"after-copy-{index}")
    time.sleep(2 * 1.0 + 1)  # two anchor intervals
    intact = verify_collected(topology, collect(topology, topology.work / "collected"))
    deleted = collect(topology, topology.work / "collected-deleted")
    for path in deleted.glob(f"{topology.replicas[-1].host.name}.jsonl*"):
        path.unlink()
    without = verify_collected(topology, deleted)
    rolled = verify_collected(
        topology,
        collect(topology, topology.work / "collected-rolled", {"replica2": older}),
    )
    return {
        "what": "every replica's chain, collected in one folder, against the anchor log",
        "intact": {"ok": intact.returncode == 0, "out": intact.stdout.strip()},
        "deleted": {"failed": without.returncode == 1, "err": without.stderr.strip()},
        "rolled_back": {"failed": rolled.returncode == 1, "err": rolled.stderr.strip()},
    }


_WRK_LUA = """wrk.method = "POST"
wrk.body = [==[{"id":"w","name":"add","arguments":{"a":2,"b":3}}]==]
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-API-Key"] = "%s"
"""


def scenario_throughput(topology: Topology, seconds: int) -> dict[int, dict[str, float]]:
    """Requests/s of ``wrk`` on the client host against 1, 2 and 3 replicas at once."""
    wrk = os.environ.get("WRK_BIN") or shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is required: WRK_BIN=$(scripts/provision-wrk)")
    script = topology.work / "call.lua"
    script.write_text(_WRK_LUA % topology.api_key, encoding="utf-8")
    rates = {}
    for count in range(1, len(topology.replicas) + 1):
        runs = [
            topology.client.popen(
                [wrk, "-t1", "-c8", f"-d{seconds}s", "-s", str(script), replica.url + "/v1/calls"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for replica in topology.replicas[:count]
        ]
        total = 0.0
        non_2xx = 0
        for run in runs:
            out, _ = run.communicate(timeout=seconds + 60)
            rate = re.search(r"Requests/sec:\s+([0-9.]+)", out)
            total += float(rate.group(1)) if rate else 0.0
            bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
            non_2xx += int(bad.group(1)) if bad else 0
        rates[count] = {"requests_per_s": round(total, 1), "non_2xx": non_2xx}
    return rates


def run_all(repeats: int, seconds: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Build the topology, run every scenario, and return what was measured."""
    log("building the topology")
    started = time.monotonic()
    topology = build()
    results: dict[str, Any] = {
        "topology": {
            "bundle_server": topology.bundle_host.address,
            "client": topology.client.address,
            "redis": topology.redis_host.address,
            "replicas": [
                {"host": r.host.name, "address": r.host.address, "engine": r.engine}
                for r in topology.replicas
            ],
            "start_s": round(time.monotonic() - started, 1),
        }
    }
    try:
        log("rollouts")
        rollouts = scenario_rollouts(topology, repeats)
        results["rollouts"] = rollouts
        granted = rollouts["granted"]
        log("faults")
        faults = [
            scenario_wrong_key(topology, granted),
            scenario_outage(topology, granted, "server stopped"),
            scenario_outage(topology, granted, "link down"),
        ]
        recovery = scenario_recovery(topology, granted)
        granted = recovery["granted"]
        faults.append(recovery)
        if not granted:
            again = topology.make_bundles("regrant", grant=True)
            converge(topology, True, topology.publish(again))
            granted = True
        faults.append(scenario_kill(topology, topology.replicas[0], granted))
        faults.append(scenario_redis(topology, "link down"))
        faults.append(scenario_redis(topology, "stalled (SIGSTOP)"))
        faults.append(scenario_sidecar_link(topology))
        results["faults"] = faults
        log("audit")
        results["audit"] = scenario_collected_trails(topology)
        log("throughput")
        results["throughput"] = scenario_throughput(topology, seconds)
    finally:
        topology.close()
    results["machine"] = {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    return results


def _caught(outcome: dict[str, Any]) -> str:
    last = outcome["err"].splitlines()[-1] if outcome["err"] else ""
    return f"{'detected' if outcome['failed'] else 'MISSED'}: `{last}`"


def markdown(results: dict[str, Any]) -> str:
    """SCALEOUT.md from the results of :func:`run_all`."""
    t = results["topology"]
    lines = [
        "# Scale-out: replicas on separate network hosts",
        "",
        "Generated by `python -m scaleout` (`make scaleout`). Every host is a Linux network",
        "namespace on one bridge, made by the harness; the processes are the real ones:",
        "Python's static `http.server` serving OPA bundles built and signed (RS256) by the",
        "pinned `opa`, `gateway serve` per replica, `opa run --server` as a sidecar, `wrk`.",
        "",
        "| host | address | what runs there |",
        "| --- | --- | --- |",
        f"| bundles | {t['bundle_server']} | static HTTP server of the signed bundles |",
        f"| client | {t['client']} | wrk (throughput) |",
        f"| redis | {t['redis']} | redis-server: the replicas' shared session and quota state |",
    ]
    for r in t["replicas"]:
        what = (
            f"gateway serve, embedded engine polling the bundle server every {POLL_S:g} s"
            if r["engine"] == "embedded"
            else "gateway serve, asking an OPA sidecar (loopback) that polls every 1 s"
        )
        lines.append(f"| {r['host']} | {r['address']} | {what} |")
    ro = results["rollouts"]
    lines += [
        "",
        f"Start of the whole topology (bundles compiled, every replica ready): {t['start_s']} s.",
        "",
        "## Rollout",
        "",
        "Each rollout publishes a new signed revision that revokes (or grants again) `add` for",
        "the caller's role, after the decision was cached on every replica; the time is from",
        "the bundle's publication until the replica answers as the new revision says.",
        "",
        "| revision | grant | " + " | ".join(r["host"] for r in t["replicas"]) + " |",
        "| --- | --- | " + " | ".join("---" for _ in t["replicas"]) + " |",
    ]
    for rollout in ro["rollouts"]:
        cells = " | ".join(f"{rollout['seconds'][r['host']]:.2f} s" for r in t["replicas"])
        grant = "granted" if rollout["granted"] else "revoked"
        lines.append(f"| {rollout['revision']} | {grant} | {cells} |")
    lines += [
        "",
        f"Every replica enforced the new revision within **{ro['max_s']:.2f} s** (median of the",
        f"slowest replica per rollout {ro['median_s']:.2f} s) over {len(ro['rollouts'])} rollouts.",
        "",
        "## Faults",
        "",
        "| fault | calls | wrong answers / missing records |",
        "| --- | --- | --- |",
    ]
    for fault in results["faults"]:
        if "seconds" in fault:
            worst = max(fault["seconds"].values())
            lines.append(f"| {fault['what']} | - | converged in {worst:.2f} s |")
        elif "acknowledged" in fault:
            lines.append(
                f"| {fault['what']} | {fault['calls']} ({fault['acknowledged']} acknowledged "
                f"as run) | {fault['missing_from_trail']} missing from the trail; trail "
                f"verifies after restart: {fault['trail_verifies_after_restart']} |"
            )
        elif "opa_asked" in fault:
            seen = ", ".join(f"{n} x {code}" for code, n in fault["statuses"].items())
            lines.append(
                f"| {fault['what']} | {fault['calls']} | {fault['wrong']} wrong ({seen}); "
                f"OPA asked {fault['opa_asked']} times for {fault['calls']} calls |"
            )
        elif "back_s" in fault:
            lines.append(
                f"| {fault['what']} | {fault['calls']} | {fault['wrong']} wrong, "
                f"{fault['unauthorized']} run without state; all back in {fault['back_s']:.2f} s |"
            )
        else:
            lines.append(f"| {fault['what']} | {fault['calls']} | {fault['wrong']} |")
    audit = results["audit"]
    lines += [
        "",
        "## Audit",
        "",
        "Every replica writes its own chain and anchors its durable head (every 1 s) in one",
        "anchor log kept apart from the trails. The chains, collected in one folder, are",
        "verified together with `gateway audit verify --key-file KEY --anchors LOG FOLDER`:",
        "",
        "| collected folder | result |",
        "| --- | --- |",
        f"| every chain | {'ok' if audit['intact']['ok'] else 'FAILED'} |",
        f"| one replica's chain deleted | {_caught(audit['deleted'])} |",
        f"| replica2 rolled back to an older copy (head and all) | "
        f"{_caught(audit['rolled_back'])} |",
    ]
    lines += ["", "## Throughput", "", "| replicas | requests/s | non-2xx |", "| --- | --- | --- |"]
    for count, rate in results["throughput"].items():
        lines.append(f"| {count} | {rate['requests_per_s']} | {rate['non_2xx']} |")
    m = results["machine"]
    lines += [
        "",
        f"Machine: {m['cpus']} CPUs shared by every host, Python {m['python']}, kernel",
        f"{m['kernel']}, load average {m['load_average']} at the end. All replicas share these",
        "cores, so throughput shows how the replicas share one machine, not how separate",
        "machines would scale.",
        "",
        "Not run here: `tc netem` (packet loss, fixed latency): this kernel has no netem",
        "queueing discipline (`Specified qdisc kind is unknown`). Links are taken down instead,",
        "and the sidecar link is slowed by a token bucket (`tc tbf`) whose queue delays and",
        "drops what exceeds it.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios; write the JSON results and SCALEOUT.md."""
    parser = argparse.ArgumentParser(prog="python -m scaleout", description=__doc__)
    parser.add_argument("--repeats", type=int, default=5, help="rollouts to time")
    parser.add_argument("--seconds", type=int, default=10, help="wrk duration per step")
    parser.add_argument("--json", type=Path, default=ROOT / "scaleout" / "results.json")
    parser.add_argument("--markdown", type=Path, default=ROOT / "SCALEOUT.md")
    args = parser.parse_args(argv)
    results = run_all(args.repeats, args.seconds, lambda m: print(f"scaleout: {m}", flush=True))
    args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    args.markdown.write_text(markdown(results), encoding="utf-8")
    print(markdown(results))
    return 0


__all__ = ["GATEWAY_PORT", "main", "markdown", "run_all"]
