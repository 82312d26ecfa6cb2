"""``sbatch``/``srun`` arguments read as Slurm reads them (pure; docs/cluster.md).

Slurm parses its command line with glibc's ``getopt_long`` and the option string
``"+..."``: any unambiguous prefix of a long option names it (``--partit=gpu`` is
``--partition``), an exact name wins over longer ones (``--mem`` over ``--mem-bind``),
short options bundle (``-vN2`` is ``-v -N 2``), a value follows ``=`` or comes as the
next argument (``-N 2``, ``--nodes 2``; an optional value only after ``=`` or attached),
and parsing stops at the first argument that is not an option. :func:`parse` does the
same with the option tables of Slurm 22.05 (``src/common/slurm_opt.c``), so that what
dltop checks in a profile's ``extra_args``/``srun_args`` is what Slurm will act on.
"""

from __future__ import annotations

from dataclasses import dataclass

NO, REQUIRED, OPTIONAL = 0, 1, 2

# One option per word: NAME, then "=" (takes a value) or "?" (an optional one), then
# "/X" for its short form, then "@CANONICAL" for an alias (same getopt entry but for
# its name: never ambiguous with it). From Slurm 22.05's common_options[], the entries
# each command adds to its getopt table.
_BOTH = (
    "account=/A acctg-freq= begin=/b bb= bbf= cluster-constraint= chdir=/D cluster= "
    "clusters=/M comment= container= context= contiguous constraint=/C core-spec=/S "
    "cores-per-socket= cpu-freq= cpus-per-gpu= cpus-per-task=/c deadline= delay-boot= "
    "dependency=/d distribution=/m error=/e exclude=/x exclusive? export= "
    "extra-node-info=/B gid= gpu-bind= gpu-freq= gpus=/G gpus-per-node= gpus-per-socket= "
    "gpus-per-task= gres= gres-flags= help/h hint= hold/H input=/i job-name=/J "
    "licenses=/L mail-type= mail-user= mcs-label= mem= mem-bind= mem-per-cpu= "
    "mem-per-gpu= mincpus= network= nice? no-kill?/k nodefile=/F nodelist=/w nodes=/N "
    "ntasks=/n ntasks-per-core= ntasks-per-gpu= ntasks-per-node= ntasks-per-socket= "
    "ntasks-per-tres= open-mode= output=/o overcommit/O oversubscribe/s partition=/p "
    "power= prefer= priority= profile= propagate? qos=/q quiet/Q reboot reservation= "
    "signal= sockets-per-node= spread-job switches= tasks-per-node=@ntasks-per-node "
    "test-only thread-spec= threads-per-core= time=/t time-min= tmp= uid= use-min-nodes "
    "verbose/v version/V usage wckey=")
_SBATCH = (
    "array=/a batch= export-file= get-user-env? ignore-pbs kill-on-invalid-dep= "
    "no-requeue parsable requeue wait/W wait-all-nodes= wrap=")
_SRUN = (
    "accel-bind= bcast? bcast-exclude= compress? cpu-bind= cpu_bind=@cpu-bind debugger-test "
    "disable-status/X epilog= exact het-group= immediate?/I interactive jobid= "
    "kill-on-bad-exit?/K label/l threads=/T mpi= msg-timeout= multi-prog no-allocate/Z "
    "overlap? pack-group=@het-group preserve-env/E prolog= pty quit-on-interrupt "
    "relative=/r resv-ports? send-libs? slurmd-debug= task-epilog= task-prolog= "
    "unbuffered/u wait=/W whole "
    # pyxis, the container plugin (a SPANK plugin adds its options to srun's table)
    "container-image= container-mounts= container-workdir= container-name= "
    "container-save= container-mount-home no-container-mount-home container-remap-root "
    "no-container-remap-root container-entrypoint no-container-entrypoint "
    "container-entrypoint-log container-writable container-readonly container-env=")


@dataclass(frozen=True)
class Option:
    """One entry of a command's getopt table."""

    name: str
    """The long name (``partition``); an alias's is its own (``cpu_bind``)."""
    arg: int
    """:data:`NO`, :data:`REQUIRED` or :data:`OPTIONAL` value."""
    short: str | None = None
    canonical: str = ""
    """The option it is (``cpu-bind`` for ``cpu_bind``); its own name for most."""


def _table(words: str) -> dict[str, Option]:
    out = {}
    for word in words.split():
        word, _, canonical = word.partition("@")
        word, _, short = word.partition("/")
        arg = REQUIRED if word.endswith("=") else OPTIONAL if word.endswith("?") else NO
        name = word.rstrip("=?")
        out[name] = Option(name, arg, short or None, canonical or name)
    return out


TABLES: dict[str, dict[str, Option]] = {
    "sbatch": _table(_BOTH + " " + _SBATCH),
    "srun": _table(_BOTH + " " + _SRUN),
}
"""Each command's long options by name."""


@dataclass(frozen=True)
class Parsed:
    """One option as Slurm reads it from the arguments."""

    written: str
    """As the user wrote it: ``--partit``, ``-N`` (in ``-vN2``)."""
    arg: str
    """The argument it came in: ``--partit=gpu``, ``-vN2``."""
    option: Option
    value: str | None
    missing: bool = False
    """It needs a value and the arguments ended: Slurm would take the script's path."""

    @property
    def name(self) -> str:
        """The option it is, long form: ``--partition``."""
        return f"--{self.option.canonical}"


class OptionError(ValueError):
    """Arguments Slurm would refuse or read otherwise than as options (one-line text)."""


def resolve(prefix: str, command: str) -> Option:
    """The long option ``--prefix`` names for ``command``, as getopt_long finds it.

    Raises:
        OptionError: no option starts so, or several different ones do.
    """
    table = TABLES[command]
    if prefix in table:
        return table[prefix]
    found = [o for name, o in table.items() if name.startswith(prefix)]
    if not found:
        raise OptionError(f"--{prefix} is not an option of {command}")
    first = found[0]
    if any(o.canonical != first.canonical or o.arg != first.arg for o in found[1:]):
        names = sorted({f"--{o.canonical}" for o in found})
        raise OptionError(f"--{prefix} is ambiguous for {command} ({', '.join(names)})")
    return first


def _short(letter: str, command: str) -> Option | None:
    for o in TABLES[command].values():
        if o.short == letter:
            return o
    return None


def parse(args: tuple[str, ...] | list[str], command: str) -> list[Parsed]:
    """Every option in ``args`` as ``command`` (``sbatch`` or ``srun``) would read it.

    Raises:
        OptionError: an argument that is not an option (Slurm would stop reading
            options there and take it as the script or program), an unknown or
            ambiguous option, or a value given to an option that takes none. A value
            missing at the end is :attr:`Parsed.missing`.
    """
    out: list[Parsed] = []
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--" or not arg.startswith("-") or arg == "-":
            raise OptionError(f"{arg!r} is not an option: {command} would stop reading "
                              "options there and run it")
        if arg.startswith("--"):
            written, eq, attached = arg[2:].partition("=")
            value: str | None = attached if eq else None
            try:
                opt = resolve(written, command)
            except OptionError as exc:
                raise OptionError(f"{arg!r}: {exc}") from None
            if eq and opt.arg == NO:
                raise OptionError(f"{arg!r}: --{opt.canonical} takes no value")
            if not eq and opt.arg == REQUIRED and i < len(args):
                value, i = args[i], i + 1
            out.append(Parsed(f"--{written}", arg, opt, value,
                              missing=opt.arg == REQUIRED and value is None))
            continue
        pos = 1
        while pos < len(arg):
            letter = arg[pos]
            pos += 1
            found = _short(letter, command)
            if found is None:
                raise OptionError(f"{arg!r}: -{letter} is not an option of {command}")
            val: str | None = None
            if found.arg != NO:
                if pos < len(arg):
                    val, pos = arg[pos:], len(arg)
                elif found.arg == REQUIRED and i < len(args):
                    val, i = args[i], i + 1
            out.append(Parsed(f"-{letter}", arg, found, val,
                              missing=found.arg == REQUIRED and val is None))
    return out
