"""Small OpenHTF tests whose JSON test records are stq's OpenHTF fixtures.

Run by generate.sh inside a virtual environment with the pinned OpenHTF:
    python benches.py OUTPUT_DIRECTORY
Each bench writes OUTPUT_DIRECTORY/<name>.openhtf.json with OpenHTF's own JSON
output callback, so the fixtures are what a real station writes, not a guess at it.
README.md beside this file lists what each record covers.
"""

import os
import sys

import openhtf as htf
from openhtf.output.callbacks import json_factory
from openhtf.util import configuration
from openhtf.util import units

CONF = configuration.CONF


# --- passing.openhtf.json: every unit, validator and value form, all passing ----


@htf.measures(
    # A unit with a suffix: the metric's `unit` is "V".
    htf.Measurement('vcc').with_units(units.VOLT).in_range(3.0, 3.6),
    # Only a lower bound; an integer value; a suffix with a non-ASCII character.
    htf.Measurement('temperature').with_units(units.DEGREE_CELSIUS)
    .in_range(minimum=-10),
    # Only an upper bound.
    htf.Measurement('ripple').with_units(units.VOLT).in_range(maximum=0.05),
    # equals(3) is written `x == 3`: both limits are 3.
    htf.Measurement('rail_count').equals(3),
    # Marginal bounds inside a range: the limits are the outer bounds.
    htf.Measurement('vref').with_units(units.VOLT)
    .in_range(1.0, 2.0, marginal_minimum=1.1, marginal_maximum=1.9),
    # A unit whose suffix is None: its name is used.
    htf.Measurement('gain').with_units(units.NO_DIMENSION),
    # A unit whose suffix is '': its name is used.
    htf.Measurement('humidity').with_units(units.PERCENT_VOLUME)
    .in_range(minimum=0, maximum=100),
)
def power(test):
  test.measurements.vcc = 3.3
  test.measurements.temperature = 25
  test.measurements.ripple = 0.012
  test.measurements.rail_count = 3
  test.measurements.vref = 1.5
  test.measurements.gain = 1.25e-3
  test.measurements.humidity = 40.5


@htf.measures(
    # A non-numeric validator: no limits.
    htf.Measurement('firmware').matches_regex(r'^v\d+\.\d+\.\d+$'),
    # The first validator has no recognised form, the second has: its bounds.
    htf.Measurement('frequency').with_units(units.HERTZ)
    .within_percent(1000, 5).in_range(900, 1100),
    # Two recognised forms: the first one's bounds.
    htf.Measurement('leakage').in_range(maximum=10).in_range(minimum=0),
    # A number Python writes with an exponent, in the value and in the bound.
    htf.Measurement('standby_current').with_units(units.AMPERE)
    .in_range(maximum=1e-6),
    # Values of other JSON types, no validators, no units.
    htf.Measurement('self_test'),
    htf.Measurement('samples'),
    htf.Measurement('calibration'),
    # Never set: no metric record.
    htf.Measurement('never_set'),
)
def identity(test):
  test.measurements.firmware = 'v1.2.3'
  test.measurements.frequency = 1001
  test.measurements.leakage = 2
  test.measurements.standby_current = 2.5e-9
  test.measurements.self_test = True
  test.measurements.samples = [1, 2.5, -3]
  test.measurements.calibration = {'gain': 1.02, 'label': 'Straße', 'ok': None}


# --- failing.openhtf.json: a validator fails ------------------------------------


@htf.measures(
    htf.Measurement('vcc').with_units(units.VOLT).in_range(3.0, 3.6),
    htf.Measurement('current').with_units(units.AMPERE).in_range(maximum=0.5),
)
def power_fail(test):
  test.measurements.vcc = 3.9
  test.measurements.current = 0.25


# --- erroring.openhtf.json: a phase raises ----------------------------------------


@htf.measures(htf.Measurement('vcc').with_units(units.VOLT).in_range(3.0, 3.6))
def power_ok(test):
  test.measurements.vcc = 3.31


@htf.measures(
    htf.Measurement('flash_size').in_range(minimum=1024),
    htf.Measurement('flash_id'),
)
def flash(test):
  test.measurements.flash_size = 4096
  raise RuntimeError('the programmer lost the DUT')


# --- the benches ----------------------------------------------------------------


def run(directory, name, station, dut, phases, **metadata):
  """Runs one test on `station` for `dut` and writes its record as <name>."""
  # A measurement left unset fails its phase unless this is set; the passing
  # bench has one (`never_set`) and should still pass.
  CONF.load(station_id=station, allow_unset_measurements=(name == 'passing'))
  test = htf.Test(*phases, **metadata)
  path = os.path.join(directory, name + '.openhtf.json')
  # indent=2 as a shop would write it to read it; the failing bench keeps
  # OpenHTF's default separators to cover both layouts.
  json_kwargs = {} if name == 'failing' else {'indent': 2}
  test.add_output_callbacks(json_factory.OutputToJSON(path, **json_kwargs))
  test.execute(test_start=lambda: dut)


def main():
  directory = sys.argv[1]
  run(directory, 'passing', 'ST-OHTF-A', 'SN-PASS-001', [power, identity],
      test_name='board_power', test_description='Power rails and identity',
      operator={'badge': 1042, 'shift': 'night'}, fixture_revision=3.10)
  run(directory, 'failing', 'ST-OHTF-A', 'SN-FAIL-002', [power_fail],
      test_name='board_power')
  run(directory, 'erroring', 'ST-OHTF-B', 'SN-ERR-003', [power_ok, flash],
      test_name='flash_program', line='L2')


if __name__ == '__main__':
  main()
