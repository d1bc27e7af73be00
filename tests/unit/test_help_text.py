"""What every verb's --help says stays true and readable at 80 columns (issue 62, item 8): the
providers --provider names are the catalog's, and an example's comment never wraps into a line
that reads like a command of its own."""

import importlib
import pkgutil
import re

import gpuscout.cli
from gpuscout import catalog
from gpuscout.cli.options import CATALOG_PROVIDERS


def test_the_providers_named_in_the_help_are_the_catalog_s():
    cat = catalog.load()
    clouds = {p.provider for g in cat.gpus for p in cat.prices_for(g.id) if p.kind == "cloud"}
    assert set(CATALOG_PROVIDERS) == clouds


def test_an_example_with_a_comment_fits_an_80_column_help():
    """Rich prints an example indented by one column inside the 80: a command with its comment
    must fit in 78, or the comment goes on the line above it."""
    too_long = []
    for module in pkgutil.iter_modules(gpuscout.cli.__path__):
        text = importlib.import_module(f"gpuscout.cli.{module.name}").__dict__.get("HELP", "")
        too_long += [line for line in text.splitlines() if re.match(r"\s*gpuscout .*\s# ", line) and len(line) > 78]
    assert too_long == []


def test_an_old_option_name_is_still_taken_and_says_its_new_one(capsys):
    from gpuscout.cli.options import Pricing

    assert Pricing(usd_per_kwh=0.2).options().usd_per_kwh == 0.2
    assert "now" not in capsys.readouterr().err
    assert Pricing(electricity_usd_per_kwh=0.3).options().usd_per_kwh == 0.3
    assert "note: --electricity-usd-per-kwh here is now --usd-per-kwh" in capsys.readouterr().err
    assert Pricing().options().usd_per_kwh == 0.15  # neither: the default (catalog/pricing.py)
    import pytest

    from gpuscout.core.errors import UsageError

    with pytest.raises(UsageError, match="--electricity-usd-per-kwh is --usd-per-kwh's old name"):
        Pricing(usd_per_kwh=0.2, electricity_usd_per_kwh=0.3).options()


def test_a_renamed_option_takes_its_old_name_says_the_new_one_and_refuses_both(capsys):
    """compare's and report's name filter is --gpu-name (--gpu is a GPU's index in bench and tune)."""
    import pytest

    from gpuscout.cli.options import renamed
    from gpuscout.core.errors import UsageError

    assert renamed("--gpu", "--gpu-name", None, "A100") == "A100" and capsys.readouterr().err == ""
    assert renamed("--gpu", "--gpu-name", "A100", None) == "A100"
    assert "note: --gpu here is now --gpu-name" in capsys.readouterr().err
    with pytest.raises(UsageError, match="--gpu is --gpu-name's old name: give --gpu-name alone"):
        renamed("--gpu", "--gpu-name", "A100", "H100")
