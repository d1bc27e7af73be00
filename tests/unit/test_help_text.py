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
    assert "note: --electricity-usd-per-kwh is now --usd-per-kwh" in capsys.readouterr().err
