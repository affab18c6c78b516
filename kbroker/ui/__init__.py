"""`kbroker ui`: a read-only web page for a whole cluster (issue 32): lag over time, group status, health."""
