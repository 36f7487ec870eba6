"""Example pipeline jobs over the appliance data source (see spark/README.md)."""
