from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.sample import GpuInfo, GpuSample, XidEvent

counts = st.one_of(st.none(), st.integers(min_value=0, max_value=2**40))
reals = st.one_of(st.none(), st.floats(min_value=0, max_value=1e4, allow_nan=False))

samples = st.builds(
    GpuSample,
    gpu_uuid=st.text(min_size=1, max_size=40),
    index=st.integers(min_value=0, max_value=15),
    timestamp=st.floats(min_value=0, max_value=4e9, allow_nan=False),
    gpu_util=reals,
    mem_used_mb=counts,
    mem_total_mb=counts,
    temperature_c=reals,
    power_w=reals,
    sm_clock_mhz=counts,
    throttle_reasons=counts,
    ecc_sbe_volatile=counts,
    ecc_dbe_volatile=counts,
    ecc_corrected_total=counts,
    ecc_uncorrected_total=counts,
    retired_pages=counts,
    remapped_rows=counts,
    remapped_rows_pending=st.one_of(st.none(), st.booleans()),
    remapped_rows_failed=st.one_of(st.none(), st.booleans()),
    pcie_replay=counts,
    xid=st.integers(min_value=0, max_value=200),
    lost=st.booleans(),
    processes=st.lists(st.tuples(st.integers(1, 2**22), st.integers(0, 10**6)), max_size=4).map(tuple),
)


@given(samples)
def test_sample_round_trips_through_json(sample: GpuSample) -> None:
    assert GpuSample.from_dict(json.loads(json.dumps(sample.to_dict()))) == sample


def test_info_and_event_round_trip() -> None:
    info = GpuInfo(index=2, uuid="GPU-x", model="H100", memory_mb=81_559)
    event = XidEvent(gpu_uuid="GPU-x", xid=79, timestamp=12.5)
    assert GpuInfo.from_dict(info.to_dict()) == info
    assert XidEvent.from_dict(event.to_dict()) == event


def test_minimal_sample_defaults_unknown_fields_to_none_and_ignores_extra_keys() -> None:
    s = GpuSample.from_dict({"gpu_uuid": "GPU-x", "index": 0, "timestamp": 1, "future_field": 3})
    assert s.temperature_c is None and s.xid == 0 and not s.lost and s.processes == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a JSON object"),
        ({"index": 0, "timestamp": 1}, "'gpu_uuid' is required"),
        ({"gpu_uuid": "", "index": 0, "timestamp": 1}, "non-empty string"),
        ({"gpu_uuid": "g", "index": "0", "timestamp": 1}, "'index' must be an integer"),
        ({"gpu_uuid": "g", "index": 0, "timestamp": float("nan")}, "finite number"),
        ({"gpu_uuid": "g", "index": 0, "timestamp": 1, "ecc_dbe_volatile": True}, "must be an integer"),
        ({"gpu_uuid": "g", "index": 0, "timestamp": 1, "lost": 1}, "true or false"),
        ({"gpu_uuid": "g", "index": 0, "timestamp": 1, "processes": [[1]]}, "pairs"),
    ],
)
def test_bad_wire_data_is_a_value_error(data: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        GpuSample.from_dict(data)  # type: ignore[arg-type]
