"""Sources turn vendor libraries and the host into Snapshot parts. One module per vendor."""
