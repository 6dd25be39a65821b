"""What the supervisor measures of itself, for Prometheus and the status page.

Modules: ``meter`` (tool calls by server: outcomes, a latency histogram, and a one-minute sliding
window; fed by the call table on the hot path, so plain ints), ``procs`` (resident memory of
processes, read from ``/proc`` at scrape time), ``collector`` (the Prometheus collector: every
figure computed when scraped, for one supervisor's own ``CollectorRegistry``).
"""
