"""Schemathesis against the live OpenAPI schema, with a fixed seed: no request may get a 5xx,
and every status a route answers is one its schema declares, with a JSON `{"detail": …}` body
for every error. Schemathesis's own pytest plugin does not run under this pytest, so its cases
are drawn with hypothesis directly, one operation at a time.
"""

import re

import hypothesis
import requests
import schemathesis

from tests.reliability.conftest import LONG

EXAMPLES = 100 if LONG else 15
ANSWER_SECONDS = 30


def test_it_answers_no_server_error(shared_server, record_property):
    base_url = f"http://127.0.0.1:{shared_server.port}"
    schema = schemathesis.openapi.from_url(f"{base_url}/api/openapi.json")
    headers = {"Authorization": f"Bearer {shared_server.key}"}
    sent, server_errors, stalled, undeclared = [], [], [], []
    declared_of: dict[str, set[str]] = {}

    for result in schema.get_all_operations():
        operation = result.ok()
        declared_of[operation.label] = set(operation.definition.raw.get("responses", {}))

        @hypothesis.settings(
            max_examples=EXAMPLES,
            derandomize=True,
            deadline=None,
            suppress_health_check=list(hypothesis.HealthCheck),
            database=None,
            phases=[hypothesis.Phase.explicit, hypothesis.Phase.generate],
        )
        @hypothesis.given(case=operation.as_strategy())
        def exercise(case):
            try:
                response = case.call(base_url=base_url, headers=headers, timeout=ANSWER_SECONDS)
            except requests.RequestException as exc:
                stalled.append(f"{case.operation.label}: no answer ({type(exc).__name__})")
                return
            sent.append(response.status_code)
            answer = f"{case.operation.label} → {response.status_code}: {response.text[:200]}"
            if response.status_code >= 500:
                server_errors.append(answer)
            if str(response.status_code) not in declared_of[case.operation.label]:
                undeclared.append(answer)
            elif response.status_code >= 400 and "detail" not in response.json():
                undeclared.append(f"{answer} (no detail)")

        exercise()

    record_property("fuzz_requests", len(sent))
    print(
        f"fuzz requests: {len(sent)}, server errors: {len(server_errors)}, "
        f"unanswered within {ANSWER_SECONDS} s: {len(stalled)}, "
        f"undeclared answers: {len(undeclared)}"
    )
    assert len(sent) >= EXAMPLES
    logged = re.split(r"\n(?=\d{4}-\d\d-\d\d )", shared_server.log_path.read_text())
    errors_logged = "\n".join(entry for entry in logged if " ERROR " in entry.split("\n", 1)[0])
    assert server_errors == [] and stalled == [], errors_logged[-6000:]
    assert undeclared == [], undeclared[:10]
