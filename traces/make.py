#!/usr/bin/env python3
"""Writes the traces shipped in this directory, in mahimahi's delivery-opportunity
format: one line per opportunity to deliver a 1500-byte packet, its time in ms; the
trace repeats after its last time. Deterministic (a fixed seed): running it again
writes the same files.

    python3 traces/make.py [DIR]        (DIR: where to write them; default: beside this script)

- steady-12mbit.trace: 12 Mbit/s, one opportunity every millisecond (1 s, repeating).
- wifi-fading.trace: a Wi-Fi-like link fading between about 6 and 54 Mbit/s as a
  station moves (a slow swing over 15 s with faster flutter on it), 30 s.
- lte-outages.trace: an LTE-like link wandering between 2 and 30 Mbit/s, with an outage
  of 200-600 ms (a handover, a fade) every 6-12 s, 60 s.
"""

import math
import os
import random
import sys

BITS_PER_OPPORTUNITY = 1500 * 8


def opportunities(rates_mbit):
    """Opportunity times (ms, from 1) for a rate given per millisecond, in Mbit/s."""
    out, credit = [], 0.0
    for ms, rate in enumerate(rates_mbit, start=1):
        credit += rate * 1e6 / BITS_PER_OPPORTUNITY / 1000.0
        while credit >= 1.0:
            out.append(ms)
            credit -= 1.0
    # The trace repeats after its last time: that must be the period's end.
    if not out or out[-1] != len(rates_mbit):
        out.append(len(rates_mbit))
    return out


def steady():
    return opportunities([12.0] * 1000)


def wifi_fading(rng):
    rates = []
    flutter = 0.0
    for ms in range(30_000):
        swing = 0.5 + 0.5 * math.sin(2 * math.pi * ms / 15_000)
        flutter = 0.995 * flutter + rng.gauss(0, 0.6)
        rates.append(min(54.0, max(6.0, 6.0 + 48.0 * swing + flutter)))
    return opportunities(rates)


def lte_outages(rng):
    rates, rate = [], 15.0
    next_outage, outage_left = rng.randint(6_000, 12_000), 0
    for ms in range(60_000):
        rate = min(30.0, max(2.0, rate + rng.gauss(0, 0.15)))
        if ms == next_outage:
            outage_left = rng.randint(200, 600)
            next_outage = ms + rng.randint(6_000, 12_000)
        if outage_left > 0:
            outage_left -= 1
            rates.append(0.0)
        else:
            rates.append(rate)
    return opportunities(rates)


def main():
    here = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    # Each trace its own seed: changing one leaves the others as they are.
    for name, times in [
        ("steady-12mbit.trace", steady()),
        ("wifi-fading.trace", wifi_fading(random.Random(1))),
        ("lte-outages.trace", lte_outages(random.Random(2))),
    ]:
        with open(os.path.join(here, name), "w") as f:
            f.write("".join(f"{t}\n" for t in times))
        mean = len(times) * BITS_PER_OPPORTUNITY / (times[-1] / 1000.0) / 1e6
        print(f"{name}: {len(times)} opportunities over {times[-1] / 1000:g} s, mean {mean:.1f} Mbit/s")


if __name__ == "__main__":
    main()
