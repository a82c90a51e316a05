"""Views: the Streamlit app, Grafana dashboards, Prometheus rules."""
