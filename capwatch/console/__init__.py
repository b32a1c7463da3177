"""The operator console: the fleet, an agent, a family and the alerts, as web pages served by
the daemon and as a self-contained HTML report; operator actions from the pages."""
