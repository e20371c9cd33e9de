"""What the harness does on this machine: processes and their process groups, docker containers and images, the
hardware it measures on, credentials kept out of logs, and the endpoints a server listens on."""
