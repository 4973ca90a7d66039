"""What a platform team plugs in beside the job's /metrics (router/driver/metrics.py): the Grafana
dashboard (dashboard.py) and the Prometheus alert rules (alerts.py), generated here and shipped
as conf/grafana/icerouter-dashboard.json and conf/prometheus/icerouter-alerts.yaml
(`icerouter observability dashboard|alerts` prints them; docs/monitoring.md)."""
