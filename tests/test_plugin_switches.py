"""Which of the plugin's switches a configuration turns on: nothing for stock ESPnet, each one named."""

import argparse

from espnet_dynres.glue.plugin_switches import PLUGIN_SWITCHES, dynres_switches, plugin_switches_on


def test_a_stock_configuration_turns_nothing_on():
    stock = argparse.Namespace(batch_type="numel", valid_batch_type=None, frontend="default", specaug="specaug",
                               model="espnet")
    assert plugin_switches_on(stock) == [] and dynres_switches(stock) == []


def test_every_switch_is_named():
    for key, values in PLUGIN_SWITCHES.items():
        for value in values:
            assert plugin_switches_on(argparse.Namespace(**{key: value})) == [f"{key}: {value}"]
    args = argparse.Namespace(batch_type="dynres", frontend="dynres", specaug="dynres", model="token_normalized")
    assert dynres_switches(args) == ["batch_type: dynres", "frontend: dynres"]  # the raw-audio ones
    assert dynres_switches(args, ("specaug",)) == ["specaug: dynres"]
