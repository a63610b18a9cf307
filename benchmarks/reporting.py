"""Cost of reporting (``--only reporting``): runs ``reporting_cost.py`` with a relay receiver to talk to."""

from __future__ import annotations

import json
import subprocess
import threading

from harness import HERE, PY, RUN_TIMEOUT, log, median

REPORTING_COST = HERE / "reporting_cost.py"


def bench_reporting_cost(env: dict[str, str], steps: int, rounds: int,
                         model: tuple[int, int, int] = (128, 32, 1)) -> dict:
    from nbworkers.magics.run.relay import RelayReceiver
    from nbworkers.protocol import wire

    key = wire.new_key()
    relay = RelayReceiver(key)
    received = [0]
    stop = threading.Event()

    def drain():
        while not stop.is_set():
            received[0] += len(relay.poll(0.05))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        run_env = {**env, "TF_USE_LEGACY_KERAS": "1", wire.ENV_RELAY: relay.address, wire.ENV_KEY: key,
                   wire.ENV_WORKER: "0", wire.ENV_GENERATION: "0"}
        proc = subprocess.run([PY, str(REPORTING_COST), str(steps), str(rounds), *map(str, model)], env=run_env,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
        line = next((entry for entry in proc.stdout.splitlines() if entry.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"reporting benchmark failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        data = json.loads(line[len("RESULT "):])
    finally:
        stop.set()
        thread.join()
        relay.close()
    ratios = [on / off for on, off in zip(data["on"], data["off"])]
    hook_ratios = [hook / off for hook, off in zip(data["hook"], data["off"])]
    result = {"on": median(data["on"]), "off": median(data["off"]), "cost": 1 - median(ratios),
              "hook_cost": 1 - median(hook_ratios),
              "own_share": data["own_share"],
              "reports_sent": data["reports_sent"], "received": received[0], "rounds": rounds, "steps": steps,
              "model": model, "spread": (min(ratios), max(ratios))}
    log(f"reporting ({model}): {result['off']:.0f} steps/s off, {result['on']:.0f} on, "
        f"cost {result['cost'] * 100:.1f} %, "
        f"own time {result['own_share'] * 100:.2f} % of the fits, "
        f"an empty per-step callback {result['hook_cost'] * 100:.1f} %")
    return result
