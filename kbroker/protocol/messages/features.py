"""Feature versioning (KIP-584): UpdateFeatures, which only the controller serves."""
from __future__ import annotations

from kbroker.protocol.schema import api

# Kafka 2.8 (apache/kafka clients/src/main/resources/common/message/UpdateFeaturesRequest.json): v0 only,
# flexible. A max_version_level below 1 with allow_downgrade asks to delete the finalized feature.
UPDATE_FEATURES = api(57, "UpdateFeatures", "0", flexible=0, request="""
    timeout_ms                 int32                v0+    default=60000
    feature_updates            [FeatureUpdateKey]   v0+
      feature                  string               v0+
      max_version_level        int16                v0+
      allow_downgrade          bool                 v0+
""", response="""
    throttle_time_ms           int32                v0+
    error_code                 int16                v0+
    error_message              string               v0+    nullable
    results                    [UpdatableFeatureResult]  v0+
      feature                  string               v0+
      error_code               int16                v0+
      error_message            string               v0+    nullable
""")

APIS = (UPDATE_FEATURES,)
