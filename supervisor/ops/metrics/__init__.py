"""What the supervisor measures of itself, for Prometheus and the console.

Modules: ``meter`` (tool calls by server: outcomes, a latency histogram, and a one-minute sliding
window; fed by the call table on the hot path, so plain ints), ``history`` (each server's last hour,
a minute a bucket, for the console's sparklines), ``latency`` (the latency buckets and their
quantiles), ``procs`` (resident memory of
processes, read from ``/proc`` at scrape time), ``collector`` (the Prometheus collector: every
figure computed when scraped, for one supervisor's own ``CollectorRegistry``).
"""
