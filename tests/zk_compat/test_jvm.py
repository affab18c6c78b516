"""zk_compat.jvm against what the JDK prints and hashes (values from JDK 17's Double.toString and String.hashCode)."""
from __future__ import annotations

import pytest

from zk_compat.jvm import java_double, java_int_hash, java_string_hash, random_base36


@pytest.mark.parametrize("value,text", [
    (-0.0, "-0.0"), (0.0, "0.0"), (float("nan"), "NaN"), (float("inf"), "Infinity"), (float("-inf"), "-Infinity"),
    (1e7, "1.0E7"), (9999999.0, "9999999.0"), (1e-3, "0.001"), (9.99e-4, "9.99E-4"), (1048576.0, "1048576.0"),
    (-5.5, "-5.5"), (1.7976931348623157e308, "1.7976931348623157E308")])
def test_double_to_string_as_java(value, text):
    assert java_double(value) == text


def test_string_hash_as_java():
    assert java_string_hash("hello") == 99162322
    assert java_int_hash("test-consumer-group") < 0 and java_int_hash("test-consumer-group") & 0xFFFFFFFF == \
        java_string_hash("test-consumer-group")
    assert java_int_hash("grp-\U0001F600") == -1235730613  # a surrogate pair: two UTF-16 units


def test_random_base36_is_kafkas_shape():
    values = {random_base36() for _ in range(50)}
    assert len(values) == 50 and all(v.isalnum() and v == v.lower() and len(v) <= 26 for v in values)
