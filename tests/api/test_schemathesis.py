"""The whole OpenAPI document, exercised by schemathesis on both databases.

Every operation gets generated requests (valid and invalid: huge integers, odd strings,
wrong types) with an admin key; half of those naming a project are pointed at a real one
with objects and a plan, half of those naming a worker session at a real session with its
token. Every response must be no 5xx, carry a documented status and content type, and
match its documented schema. Bounded: a fixed number of examples per operation.
"""

from __future__ import annotations

from collections import Counter

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.factories import make_objects, make_project, open_session, set_plan

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
EXAMPLES_PER_OPERATION = 10  # per operation and mode (valid, invalid)


@pytest.mark.slow
def test_every_operation_answers_as_documented(app, client, admin_headers) -> None:  # type: ignore[no-untyped-def]
    make_project(client, admin_headers, "known")
    make_objects(client, admin_headers, "known", 6)
    set_plan(client, admin_headers, "known")
    session_id, session_headers = open_session(client, "known")
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    failures: list[str] = []
    statuses: Counter[int] = Counter()
    operations = 0
    runs = [
        (result.ok(), mode)
        for result in schema.get_all_operations()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    ]

    def exercise(operation, mode) -> None:  # type: ignore[no-untyped-def]
        # Deleting the known project would leave the rest of the run nothing to reach.
        keep = operation.method.upper() == "DELETE" and operation.path == "/api/projects/{slug}"

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES_PER_OPERATION,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def run(case) -> None:  # type: ignore[no-untyped-def]
            path = case.path_parameters or {}
            turn = len(repr(path)) % 2 == 0  # deterministic, about half of the examples
            headers = admin_headers
            if "slug" in path and turn and not keep:
                path["slug"] = "known"
            if "session_id" in path and turn:
                path["session_id"] = session_id
                headers = session_headers
            response = case.call_and_validate(headers=headers, checks=CHECKS)
            statuses[response.status_code] += 1

        run()

    for operation, mode in runs:
        operations += mode is GenerationMode.POSITIVE
        try:
            exercise(operation, mode)
        except Unsatisfiable:
            continue  # nothing of this operation can be made invalid (no parameters)
        except (Exception, BaseExceptionGroup) as error:
            failures.append(f"{operation.label} ({mode.value}): {str(error)[:3000]}")
    assert not failures, "\n\n".join(failures)
    assert operations >= 45
    # The run reached past the refusals: real projects and sessions answered.
    assert sum(n for status, n in statuses.items() if status < 300) >= 50, statuses
    assert statuses[422] and statuses[404], statuses
