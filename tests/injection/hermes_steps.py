"""Drives the Tideline provider, as Hermes' plugin loader finds it, through a list of calls (run
inside a Hermes Agent environment). Prints, per call, what it returned or raised and how long it
took, as JSON.

usage: python hermes_steps.py < STEPS_JSON   ([[method, [args...], {kwargs...}], ...];
       the method "client_timeout" sets the provider's request timeout, to keep tests short;
       "setenv" sets an environment variable, as a new session started elsewhere would see it)
"""

import json
import os
import sys
import time

from plugins.memory import load_memory_provider


def main(steps: list) -> list:
    provider = load_memory_provider("tideline")
    seen = []
    for method, args, kwargs in steps:
        started = time.monotonic()
        try:
            if method == "client_timeout":
                provider._client.timeout = args[0]
                result = None
            elif method == "setenv":
                os.environ[args[0]] = args[1]
                result = None
            else:
                result = getattr(provider, method)(*args, **kwargs)
            raised = None
        except Exception as exc:
            result, raised = None, f"{type(exc).__name__}: {exc}"
        seen.append({"result": result, "raised": raised, "seconds": time.monotonic() - started})
    return seen


if __name__ == "__main__":
    print(json.dumps(main(json.load(sys.stdin)), ensure_ascii=False, default=repr))
