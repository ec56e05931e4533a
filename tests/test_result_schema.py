"""`fsprof report --json` prints a document that validates against the published, versioned
schema (profiler/schema/result.schema.json, docs/result-schema.md); the schema is strict enough
to reject a result that lost a field or changed a type."""

import copy
import json

import jsonschema
import pytest

from conftest import RESULT_SCHEMA, run_fsprof

pytestmark = [pytest.mark.slow, pytest.mark.root]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("schema")
    proc = run_fsprof(
        "run", "--fs", "ext4,xfs", "--count", "30", "--scratch-dir", str(tmp / "scratch"), "-o", str(tmp / "run")
    )
    assert proc.returncode == 0, proc.stderr
    return tmp / "run"


def test_report_json_validates(run_dir):
    proc = run_fsprof("report", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    RESULT_SCHEMA.validate(doc)
    assert doc["schema"] == RESULT_SCHEMA.schema["$id"]
    # Conditions of a fair comparison are recorded as read, set or not.
    assert (
        doc["sysctls_in_force"]["vm.dirty_writeback_centisecs"]
        == open("/proc/sys/vm/dirty_writeback_centisecs").read().strip()
    )
    for fs in doc["filesystems"]:
        assert fs["mount_options_in_force"] and fs["device"]["write_cache"]


@pytest.mark.parametrize(
    "break_it",
    [
        lambda r: r["filesystems"][0].pop("attribution"),
        lambda r: r["filesystems"][0]["syscalls"]["fsync"].update(count="200"),
        lambda r: r["filesystems"][0]["block"][r["filesystems"][0]["device"]["name"]].update(
            bogus_class={"count": 1, "bytes": 0}
        ),
        lambda r: r.update(schema="fsprof.run/1"),
        lambda r: r["filesystems"][0]["trace"]["offcpu"][0].pop("waker_comm"),
    ],
    ids=["missing section", "count as string", "unknown block class", "other version", "trace record field"],
)
def test_schema_rejects_a_broken_result(run_dir, break_it):
    result = json.loads((run_dir / "result.json").read_text())
    broken = copy.deepcopy(result)
    break_it(broken)
    with pytest.raises(jsonschema.ValidationError):
        RESULT_SCHEMA.validate(broken)
