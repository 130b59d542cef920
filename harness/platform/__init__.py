"""Platform profiles: what a cluster is built with (admission, DNS, encryption) and how it is installed."""
