"""The approval file is read strictly: anything but approval records is refused as corrupt."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gateway.approvals import Approval, ApprovalError, ApprovalKey, FileApprovalStore
from gateway.testing import FakeClock

VALID = Approval(
    id="apr_1",
    key=ApprovalKey("pay", "d" * 64, "c" * 64),
    revision="r1",
    role="treasurer",
    subject="carl",
    message=None,
    created_at=10.0,
    expires_at=20.0,
).to_json()
SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@given(st.sampled_from(sorted(VALID)), JSON)
def test_a_record_with_any_member_replaced_is_read_or_refused_as_corrupt(
    member: str, value: Any
) -> None:
    record = {**VALID, member: value}
    code = None
    try:
        approval = Approval.from_json(record)
        approval.state(0.0)
        approval.public(0.0)
    except ApprovalError as error:
        code = error.code
    assert code in (None, "approval_store_corrupt")


@given(JSON)
def test_any_json_file_is_read_or_refused_as_corrupt(document: Any) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "approvals.json"
        path.write_text(json.dumps(document), encoding="utf-8")
        store = FileApprovalStore(path, clock=FakeClock())
        code = None
        try:
            store.all()
        except ApprovalError as error:
            code = error.code
        assert code in (None, "approval_store_corrupt")
