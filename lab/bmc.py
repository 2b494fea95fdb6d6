"""A GPU blade's BMC, simulated: OpenIPMI's ``ipmi_sim`` serving the sensors a blade's BMC has, for the BMC tests.

No BMC can be had here, so the one thing stood in for is the board: ``ipmi_sim`` (OpenIPMI's LAN BMC simulator, a
Debian package) answers IPMI 1.5 over UDP on loopback as a BMC does, from the Sensor Data Records and sensor values
written below; the real FreeIPMI reads it and the real prometheus-community/ipmi_exporter exports what FreeIPMI makes
of it (``scripts/bmc-lab.sh``). Each sensor's state (nominal, warning, critical) is FreeIPMI's judgement of the value
against the record's thresholds, as on a real board; a test moves a value or a discrete sensor's bit through the
simulator's console (:class:`BmcConsole`) and sees the exporter's state change.

The records are IPMI 2.0's Full Sensor Records (type 01h, section 43.1): owner 20h (the BMC), the sensor type and
unit, linear readings (value = M x raw), the six thresholds, and the sensor's name.
"""

from __future__ import annotations

import argparse
import socket
import time
from dataclasses import dataclass
from pathlib import Path

USER, PASSWORD = "admin", "secret"


@dataclass(frozen=True)
class SimSensor:
    """One sensor of the simulated board: its number, name, IPMI sensor type and unit, raw reading and thresholds
    (upper non-recoverable, critical, non-critical; lower non-recoverable, critical, non-critical; 0 for none), or a
    discrete sensor (``reading_type`` 6Fh, sensor-specific states) with the bit it starts at."""

    number: int
    name: str
    sensor_type: int  # 01h temperature, 02h voltage, 04h fan, 08h power supply
    unit: int = 0  # 01h degrees C, 04h volts, 12h RPM
    raw: int = 0
    thresholds: tuple[int, int, int, int, int, int] = (0, 0, 0, 0, 0, 0)
    m: int = 1
    entity: int = 0x07  # the system board
    discrete_bit: int | None = None

    def sdr(self) -> list[int]:
        """The sensor's Full Sensor Record, bytes."""
        discrete = self.discrete_bit is not None
        masks = [0x7F, 0x00, 0x7F, 0x00, 0x7F, 0x00] if discrete else [0x95, 0x7A, 0x95, 0x7A, 0x3F, 0x3F]
        body = [0x20, 0x00, self.number, self.entity, 0x01, 0x7F, 0x40 if discrete else 0x68, self.sensor_type,
                0x6F if discrete else 0x01, *masks,
                0x00, self.unit, 0x00, 0x00, self.m & 0xFF, (self.m >> 8) << 6, 0x00, 0x00, 0x00, 0x00, 0x00,
                self.raw, 0xFF, 0x00, 0xFF, 0x00, *self.thresholds, 0x00, 0x00, 0x00, 0x00, 0x00]
        name = self.name.encode()
        body += [0xC0 | len(name), *name]
        return [self.number, 0x00, 0x51, 0x01, len(body), *body]

    def commands(self) -> list[str]:
        """The simulator's commands that add the sensor and set its first reading."""
        hexes = " ".join(f"0x{b:02x}" for b in self.sdr())
        reading_type = "0x6f" if self.discrete_bit is not None else "0x01"
        out = [f"main_sdr_add 0x20 {hexes}", f"sensor_add 0x20 0 {self.number} 0x{self.sensor_type:02x} {reading_type}"]
        if self.discrete_bit is not None:
            out.append(f"sensor_set_bit_clr_rest 0x20 0 {self.number} {self.discrete_bit} 1 0")
        else:
            support = "".join("1" if t else "0" for t in self.thresholds)
            out.append(f"sensor_set_threshold 0x20 0 {self.number} settable {support} "
                       + " ".join(f"0x{t:02x}" for t in self.thresholds))
            out.append(f"sensor_set_value 0x20 0 {self.number} {self.raw} 0")
        return out


# What a GPU blade's BMC shows, the names as real boards print them: the inlet's temperature (critical at 80 °C),
# a fan (critical under 500 RPM), the 12 V rail, and a power supply's status (bit 0: present; bit 1: failed).
SENSORS = (
    SimSensor(1, "Inlet Temp", 0x01, 0x01, raw=25, thresholds=(0x5A, 0x50, 0x46, 0, 0, 0)),
    SimSensor(2, "FAN1", 0x04, 0x12, raw=60, thresholds=(0, 0, 0, 0x01, 0x05, 0x0A), m=100, entity=0x1D),
    SimSensor(3, "12V", 0x02, 0x04, raw=12, thresholds=(15, 14, 13, 9, 10, 11)),
    SimSensor(4, "PSU1 Status", 0x08, entity=0x0A, discrete_bit=0),
)


def lan_conf(port: int, console_port: int) -> str:
    """``ipmi_sim``'s configuration: one BMC on loopback ``port`` (IPMI 1.5 LAN), its console on ``console_port``."""
    return "\n".join([
        'name "raswarden-bmc"', "set_working_mc 0x20", "  startlan 1", f"    addr 127.0.0.1 {port}",
        "    priv_limit admin", *(f"    allowed_auths_{who} none md2 md5 straight"
                                   for who in ("callback", "user", "operator", "admin")),
        "    guid a123456789abcdefa123456789abcdef", "  endlan",
        f'  user 2 true "{USER}" "{PASSWORD}" admin 10 none md2 md5 straight',
        f"console 127.0.0.1 {console_port}", ""])


def emu(sensors: tuple[SimSensor, ...] = SENSORS) -> str:
    """``ipmi_sim``'s start commands: the BMC, its watchdog (sensor 0, which IPMI reserves), the sensors."""
    lines = ["mc_setbmc 0x20", "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr",
             "sel_enable 0x20 1000 0x0a", "sensor_add 0x20 0 0 35 0x6f event-only"]
    for sensor in sensors:
        lines += sensor.commands()
    return "\n".join([*lines, "mc_enable 0x20", ""])


def exporter_config() -> str:
    """ipmi_exporter's module for the simulated BMC: FreeIPMI over IPMI 1.5 LAN (``ipmi_sim`` answers RMCP+ sessions
    without the privilege FreeIPMI asks for)."""
    return "\n".join(["modules:", "  default:", f'    user: "{USER}"', f'    pass: "{PASSWORD}"', '    driver: "LAN"',
                      '    privilege: "admin"', "    timeout: 10000",
                      "    collectors: [bmc, ipmi, chassis, sel-events]", ""])


class BmcConsole:
    """The simulator's console (a telnet-like TCP prompt): moves a sensor's reading or a discrete sensor's bit."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.port, self.timeout = port, timeout

    def run(self, command: str) -> str:
        """Run one command at the prompt; returns what the simulator answered."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout) as sock:
            self._until_prompt(sock)
            sock.sendall(command.encode() + b"\n")
            return self._until_prompt(sock)

    def set_reading(self, sensor: int, raw: int) -> None:
        self.run(f"sensor_set_value 0x20 0 {sensor} {raw} 0")

    def set_state(self, sensor: int, bit: int) -> None:
        """A discrete sensor's state: ``bit`` set, the others cleared."""
        self.run(f"sensor_set_bit_clr_rest 0x20 0 {sensor} {bit} 1 0")

    def log_event(self, sensor_type: int, offset: int, sensor: int = 0x40) -> None:
        """A system event record in the BMC's event log (SEL, IPMI 2.0 section 32.1): ``offset`` of the sensor-specific
        event type 6Fh of ``sensor_type`` (0Ch memory: offset 1 an uncorrectable ECC error), from a sensor the SDR
        does not list (as a BIOS logs memory errors)."""
        self.run(f"sel_add 0x20 0x02 0x00 0x00 0x00 0x00 0x20 0x00 0x04 0x{sensor_type:02x} 0x{sensor:02x} 0x6f "
                 f"0x{offset:02x} 0xff 0xff")

    def _until_prompt(self, sock: socket.socket) -> str:
        data, deadline = b"", time.monotonic() + self.timeout
        while not data.rstrip().endswith(b">"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"ipmi_sim's console on port {self.port} gave no prompt: {data[-200:]!r}")
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data.decode(errors="replace")


def main(argv: list[str] | None = None) -> None:
    """``python -m lab.bmc write DIR --port P --console C``: the simulator's and the exporter's files in DIR."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["write"])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--console", type=int, required=True)
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / "lan.conf").write_text(lan_conf(args.port, args.console))
    (args.dir / "bmc.emu").write_text(emu())
    (args.dir / "ipmi_exporter.yml").write_text(exporter_config())


if __name__ == "__main__":
    main()
