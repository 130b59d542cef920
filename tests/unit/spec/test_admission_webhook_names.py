"""An admission probe's ``rejected_with`` that names a webhook under kdrill.io as the API server
names one (``webhook "NAME"``) must name a webhook the scenario declares: a typo there is a probe
that never succeeds, found only in the measures (harness/probes/admission.py:
AdmissionProbe.declared_problems). Another domain's webhook may be the platform's: not checked."""

from __future__ import annotations

import pytest
from scenario_copies import load_edited

from harness.spec.scenario import ScenarioError

NAME = "webhook-outage"


def probe(d, name="matched-rejected"):
    return next(p for p in d["runner"]["probes"] if p["name"] == name)


def index(tmp_path, name="matched-rejected") -> int:
    return [p["name"] for p in load_edited(tmp_path, NAME, lambda d: None).runner["probes"]].index(name)


@pytest.mark.parametrize("texts, bad", [
    (['failed calling webhook "admit-al.kdrill.io"'], 0),
    (["connection refused", 'admission webhook "deny-all.kdrill.io" denied the request'], 1),
])
def test_an_undeclared_kdrill_webhook_is_refused(tmp_path, texts, bad):
    with pytest.raises(ScenarioError) as info:
        load_edited(tmp_path, NAME, lambda d: probe(d).update(ok_when={"rejected_with": texts}))
    err = info.value
    assert err.field == f"runner.probes[{index(tmp_path)}].ok_when.rejected_with[{bad}]", str(err)
    assert err.expected.endswith(": admit-all.kdrill.io") and err.got == repr(texts[bad]), str(err)


@pytest.mark.parametrize("texts", [
    ['failed calling webhook "admit-all.kdrill.io"'],  # declared
    ['failed calling webhook "validate.kyverno.svc"'],  # another domain: perhaps the platform's
    ["failed calling webhook"],  # no name
    ["admit-al.kdrill.io"],  # not as the API names a webhook: the text may mean something else
    ["label kdrill.io/owner is required"],
])
def test_declared_other_domains_and_unnamed_texts_pass(tmp_path, texts):
    scenario = load_edited(tmp_path, NAME, lambda d: probe(d).update(ok_when={"rejected_with": texts}))
    assert probe({"runner": scenario.runner})["ok_when"] == {"rejected_with": texts}


def test_webhook_names_made_per_drill_are_not_compared(tmp_path):
    def edit(d):
        for manifest in d["workload"]["manifests"]:
            for hook in manifest.get("webhooks") or []:
                hook["name"] = "admit-all.$(namespace).kdrill.io"
        probe(d).update(ok_when={"rejected_with": ['failed calling webhook "admit-al.kdrill.io"']})

    scenario = load_edited(tmp_path, NAME, edit)
    assert probe({"runner": scenario.runner})["ok_when"]["rejected_with"] == ['failed calling webhook "admit-al.kdrill.io"']
