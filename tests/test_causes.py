"""One home for cause names (profiler/causes.py): the rules, the behind modules and compare name
causes only from it, and a name that is not there is an error when it is loaded."""

import pytest

from profiler import causes, filesystems
from profiler.analysis import attribution
from profiler.errors import FsprofError


def test_every_rule_table_names_registered_causes():
    for fs in filesystems.NAMES:
        rules = attribution.rules_for(fs)
        for rule in rules.offcpu + rules.oncpu + rules.worker:
            assert rule.cause in causes.TABLE, (fs, rule.cause)


def test_a_misspelt_cause_is_refused_when_its_rule_is_loaded():
    with pytest.raises(FsprofError, match=r"unknown cause 'journal comit wait' in analysis/rules/ext4.toml"):
        attribution.Rule({"cause": "journal comit wait", "frames": ["jbd2_log_wait_commit"]}, "ext4")


def test_each_cause_has_a_kind_a_description_and_its_own_colour():
    kinds = {causes.WAIT, causes.CPU, causes.RUNNABLE, causes.UNEXPLAINED}
    assert all(c.kind in kinds and c.description for c in causes.TABLE.values())
    assert len({c.colour for c in causes.TABLE.values()}) == len(causes.TABLE)
