"""The pre-launch drills of ``diffbench drill`` (docs/guides/after-launch.md): ``cache`` (P1), ``shapes`` (P2),
``vae`` (P3). Each module's ``run(opts, report)`` drives ``diffbench serve`` (and ``diffbench probe``) on
loopback with a local Prometheus evaluating the real rule file; see :mod:`diffbench.monitor.drill`."""
