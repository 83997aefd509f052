"""The knob table (dsconfig/knobs.py) is the one list of emitted zero_optimization keys: emit writes
exactly its rows for a stage, the search's Candidate carries exactly its chosen fields, and every row
has one reason generator."""

from __future__ import annotations

import pytest

from zerotune.dsconfig.emit import zero_section
from zerotune.dsconfig.knobs import CHOSEN_FIELDS, KNOBS, STAGE3_KNOBS, knobs_for
from zerotune.dsconfig.settings import ALIASES, ZeroSettings
from zerotune.search.candidate import Candidate
from zerotune.search.knob_reasons import KNOB_REASONS

OFFLOAD_SECTIONS = {"offload_optimizer", "offload_param"}


def _cand(stage: int) -> Candidate:
    return Candidate(stage, "none", "none", 1, 1, False, "bf16")


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_emitted_keys_are_the_table_rows_of_the_stage(stage: int) -> None:
    section = zero_section(_cand(stage))
    assert list(section) == [k.key for k in knobs_for(stage)]
    for knob in knobs_for(stage):
        expected = knob.fixed if not knob.chosen else getattr(_cand(stage), knob.field)
        assert section[knob.key] == expected


def test_offload_sections_are_the_only_keys_outside_the_table() -> None:
    section = zero_section(Candidate(3, "nvme", "cpu", 1, 1, False, "bf16"))
    assert set(section) - {k.key for k in KNOBS} == OFFLOAD_SECTIONS


def test_rows_name_zero_settings_fields_and_deepspeed_spellings() -> None:
    for knob in KNOBS:
        assert knob.field in ZeroSettings.model_fields
        assert knob.key in ALIASES.get(knob.field, (knob.field,))
        assert knob.pointer == f"/zero_optimization/{knob.key}"
        assert (knob.fixed is None) == knob.chosen
    assert len({k.key for k in KNOBS}) == len(KNOBS)


def test_candidate_carries_the_chosen_fields() -> None:
    names = list(Candidate._fields)
    assert set(CHOSEN_FIELDS) <= set(names)
    # the search slices these off the ends of the tuple (Candidate.macro, Space.memory_key, Space.refine)
    assert names[:7] == ["stage", "offload_optimizer", "offload_param", "micro_batch", "grad_accum", "checkpointing", "precision"]
    assert tuple(names[-len(STAGE3_KNOBS) :]) == STAGE3_KNOBS
    assert STAGE3_KNOBS == (
        "prefetch_bucket_size",
        "param_persistence_threshold",
        "max_live_parameters",
        "max_reuse_distance",
        "sub_group_size",
    )


def test_every_row_has_one_reason_generator() -> None:
    assert set(KNOB_REASONS) == {k.field for k in KNOBS}


def test_zero_settings_of_a_candidate_match_what_emit_writes() -> None:
    from zerotune.dsconfig.settings import resolve_zero

    for stage in (0, 1, 2, 3):
        cand = _cand(stage)
        resolved = resolve_zero(zero_section(cand))
        built = cand.zero_settings()
        for knob in knobs_for(stage):
            assert getattr(built, knob.field) == getattr(resolved, knob.field), knob.field
