#!/usr/bin/env bash
# CTest `ctest_devices`: the offloaded suites' second registration (tests/CMakeLists.txt)
# really runs on cpu-discrete: every "discrete.*" entry sets STRATA_TEST_DEVICE=cpu-discrete and
# carries its suite's "_discrete" label, all four suites are there, and no other entry sets the
# variable. A lost property (an ENVIRONMENT list split into property pairs by
# gtest_discover_tests did exactly that) would otherwise run those entries on the CPU device and
# pass without testing anything new.
set -euo pipefail
: "${STRATA_BINARY_DIR:?}"
ctest --test-dir "$STRATA_BINARY_DIR" --show-only=json-v1 >"$STRATA_BINARY_DIR/ctest_devices.json"
python3 - "$STRATA_BINARY_DIR/ctest_devices.json" <<'PY'
import json, sys
suites = {"test_offload_equiv", "test_checkpoint", "test_offload_faults", "test_state_snapshot"}
want = "STRATA_TEST_DEVICE=set:cpu-discrete"
tests = json.load(open(sys.argv[1]))["tests"]
seen = set()
for t in tests:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    sets_device = want in props.get("ENVIRONMENT_MODIFICATION", []) or any(
        v.startswith("STRATA_TEST_DEVICE=") for v in props.get("ENVIRONMENT", []))
    if not t["name"].startswith("discrete."):
        assert not sets_device, f"{t['name']} is no discrete entry but sets the test device"
        continue
    assert sets_device, f"{t['name']}: no {want} (properties: {props})"
    labels = props.get("LABELS", [])
    assert len(labels) == 1 and labels[0].endswith("_discrete"), f"{t['name']}: labels {labels}"
    seen.add(labels[0][: -len("_discrete")])
assert seen == suites, f"discrete entries for {sorted(seen)}, expected {sorted(suites)}"
count = sum(t["name"].startswith("discrete.") for t in tests)
print(f"ok: ctest_devices ({count} discrete entries)")
PY
