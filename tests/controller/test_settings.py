"""Kopf settings: each choice as documented."""

from __future__ import annotations

from tandem.control.children import CHILD_SELECTOR
from tandem.controller.config import KopfTuning
from tandem.controller.settings import build_settings
from tandem.kube import CHILD_TYPES


def test_settings_follow_the_tuning_and_the_fixed_choices() -> None:
    settings = build_settings(
        KopfTuning(watch_server_timeout_s=123), dict.fromkeys(CHILD_TYPES, CHILD_SELECTOR)
    )
    assert settings.watching.server_timeout == 123
    assert isinstance(settings.watching.server_timeout, int)
    assert settings.posting.enabled is False
    assert settings.peering.standalone is True
    assert settings.scanning.disabled is True  # no cluster-wide CRD or Namespace reads
    assert settings.persistence.finalizer == "serving.tandem.dev/operator"
    selectors = {
        (s.group, s.version, s.any_name): v for s, v in settings.watching.label_selectors.items()
    }
    assert selectors[("apps", "v1", "deployments")] == CHILD_SELECTOR
    assert selectors[("", "v1", "services")] == CHILD_SELECTOR
    assert ("serving.tandem.dev", "v1alpha1", "inferenceservices") not in selectors


def test_the_watch_timeout_is_sent_as_an_integer() -> None:
    """The API server answers ``timeoutSeconds=300.0`` with 400 (it parses an integer)."""
    for seconds, sent in ((300.0, "300"), (4.6, "5"), (0.2, "1")):
        timeout = build_settings(KopfTuning(watch_server_timeout_s=seconds)).watching
        assert str(timeout.server_timeout) == sent


def test_every_field_is_documented_with_its_unit() -> None:
    import inspect

    source = inspect.getsource(KopfTuning)
    for name in KopfTuning.__dataclass_fields__:
        assert f"    {name}:" in source
        after = source.split(f"    {name}:", 1)[1]
        assert after.split("\n", 2)[1].strip().startswith('"""'), name
