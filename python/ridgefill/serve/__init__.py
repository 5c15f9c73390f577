"""The patched llama-server as a child process: start, wait, talk to it over loopback (`server`),
and the multi-slot soak that checks fill requests next to exact ones (`soak`)."""
