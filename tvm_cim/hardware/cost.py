"""Cost primitives: what one meta-operator costs on a chip, from its hardware description.

This is the one cost model of the project.  The simulator's engine charges
every operation it executes with these functions, and the compiler's fast
estimate (:mod:`tvm_cim.compiler.estimate`) applies the same functions to the
chunk plan the code generator emits, aggregated per shared resource.  Every
function accepts numpy arrays as well as scalars, so the estimate evaluates
all chunks of a region at once.

==================  ==========================================================  ============================
operation           duration                                                     resource
==================  ==========================================================  ============================
crossbar read       ``vectors x input_steps x row_groups x read_step``           the crossbars it activates
crossbar write      ``batch x rows x write_latency``                             the crossbar
digital op          ``ceil(elements / ops_per_cycle) x latency_cycles x cycle``  chip ALU or a core's ALU
load / store        ``ceil(bytes x 8 / global-buffer bandwidth) x cycle``        global-buffer port
  ... off-chip      at the smaller of the buffer and off-chip bandwidths         global-buffer port, off-chip
scatter             ``ceil(bytes x 8 / min(link, local buffer)) x cycle``        the core's link
weight fetch        ``ceil(bytes x 8 / off-chip bandwidth) x cycle``             off-chip interface
memory-mode access  ``ceil(bytes x 8 / (arrays x memory_bandwidth)) x cycle``    the memory-mode arrays
mode switch         ``to_memory_cycles`` or ``to_compute_cycles`` x cycle        the arrays it switches
==================  ==========================================================  ============================

``read_step = max(read_latency, ceil(bitlines / adcs) x adc_latency)``;
signed activations take the input steps of their encoding (:func:`input_steps`:
two unsigned phases of the magnitude bits by default).  Energies are per operation; leakage is the chip's static
power times elapsed time (:func:`leakage_mw`).
"""

from __future__ import annotations

import numpy as np

from .schema import CIMHardware

# ALU cost names of the digital meta-operators whose hardware cost is another's
ALU_COST_OF = {"reduce": "add", "dequantize": "mul"}


def _ceil(x):
    return np.ceil(x) if isinstance(x, np.ndarray) else float(np.ceil(x))


# --------------------------------------------------------------------------- crossbars
def input_steps(hw: CIMHardware, ibits: int, signed: bool) -> int:
    """Bit-serial input steps of one MVM.

    Signed activations as ``crossbar.input_encoding`` applies them: two
    unsigned phases of the magnitude bits (``phases``), one pass of all bits
    (``offset``), or the low bits plus one sign step (``twos``).  Activations are applied at their
    storage width (:meth:`~tvm_cim.hardware.schema.CIMHardware.activation_bits`).
    """
    ibits = hw.activation_bits(ibits)
    if not signed:
        return hw.input_steps(ibits)
    enc = hw.crossbar.input_encoding
    if enc == "offset":
        return hw.input_steps(ibits)
    if enc == "twos":
        return hw.input_steps(ibits - 1) + 1
    return 2 * hw.input_steps(ibits - 1)


def read_step_ns(hw: CIMHardware, cols, wbits: int):
    """One read step of a crossbar using ``cols`` logical weight columns: analogue read or ADC sweep."""
    xb = hw.crossbar
    bitlines = np.asarray(cols) * hw.cols_per_weight(wbits)
    t = np.maximum(xb.device.read_latency_ns, np.ceil(bitlines / xb.adcs) * xb.adc_latency_ns)
    return t if isinstance(cols, np.ndarray) else float(t)


def read(hw: CIMHardware, rows, cols, vectors, groups, wbits: int, ibits: int, signed: bool):
    """A crossbar read of ``vectors`` input vectors over ``rows`` x ``cols`` (``groups`` row groups in turn).

    Returns
    -------
    ns : float or numpy.ndarray
    energy : dict
        pJ by component: ``crossbar``, ``adc``, ``dac``, ``alu`` (shift-and-add).
    """
    xb = hw.crossbar
    steps_in = input_steps(hw, ibits, signed)
    steps = vectors * steps_in * groups
    bitlines = cols * hw.cols_per_weight(wbits)
    energy = {
        "crossbar": steps * xb.device.read_energy_pj * np.minimum(rows, xb.rows_active) / xb.rows,
        "adc": steps * bitlines * xb.adc_energy_pj,
        "dac": vectors * steps_in * rows * xb.dac_energy_pj,
        "alu": steps * cols * hw.op("shift_add").energy_pj,
    }
    return steps * read_step_ns(hw, cols, wbits), energy


def mvm_ns(hw: CIMHardware, rows, cols, wbits: int, ibits: int, signed: bool):
    """One input vector through a crossbar tile of ``rows`` driven rows and ``cols`` logical columns."""
    groups = np.ceil(np.asarray(rows) / hw.crossbar.rows_active)
    t = input_steps(hw, ibits, signed) * groups * read_step_ns(hw, cols, wbits)
    return t if isinstance(rows, np.ndarray) or isinstance(cols, np.ndarray) else float(t)


def write(hw: CIMHardware, rows, cols, batch, wbits: int):
    """Programming ``rows`` x ``cols`` weights into a crossbar (rows serially), ``batch`` matrices in turn.

    Returns
    -------
    ns, energy_pj
    """
    dev = hw.crossbar.device
    ns = batch * rows * dev.write_latency_ns
    e = batch * rows * cols * hw.cols_per_weight(wbits) * dev.write_energy_pj_per_cell
    return ns, e


# --------------------------------------------------------------------------- digital units
def alu(hw: CIMHardware, op: str, elements, core_level: bool):
    """A digital meta-operator on ``elements`` elements, on a core's ALU or the chip ALU.

    Returns
    -------
    ns, energy_pj
    """
    unit = hw.core.alu if core_level else hw.chip.alu
    per = hw.ops.get(ALU_COST_OF.get(op, op))
    lat = per.latency_cycles if per else 1.0
    width = unit.ops_per_cycle if core_level else unit.ops_per_cycle * hw.system.chips  # chip ALUs pooled
    ns = _ceil(np.asarray(elements) / width) * lat * hw.cycle_ns
    ns = np.where(np.asarray(elements) > 0, ns, 0.0) if isinstance(elements, np.ndarray) else (ns if elements else 0.0)
    e = elements * (per.energy_pj if per else unit.energy_pj_per_op)
    return ns, e


# --------------------------------------------------------------------------- data movement
def link_bits(hw: CIMHardware) -> int:
    """Bits per cycle a core receives: the smaller of its NoC link and its local buffer port, and, on an
    accelerator of several chips, of the inter-chip link its input crosses (``system``)."""
    bits = min(hw.chip.noc.link_bandwidth_bits, hw.core.local_buffer.bandwidth_bits)
    return min(bits, hw.system.link_bandwidth_bits) if hw.system.chips > 1 else bits


def buffer_bits(hw: CIMHardware, offchip: bool) -> int:
    """Bits per cycle of a load / store: the global-buffer port (pooled over the chips of the
    accelerator), or off-chip memory through it."""
    gb = hw.chip.global_buffer.bandwidth_bits * hw.system.chips
    return min(gb, hw.chip.offchip_bandwidth_bits) if offchip else gb


def load_store(hw: CIMHardware, nbytes, offchip: bool):
    """A load or store between the global buffer (or off-chip memory) and the compute path.

    Returns
    -------
    ns : float or numpy.ndarray
    energy : dict
        pJ by component: ``noc+buffer`` and, off-chip, ``offchip``.
    """
    buf = hw.chip.global_buffer
    ns = _ceil(np.asarray(nbytes) * 8 / buffer_bits(hw, offchip)) * hw.cycle_ns
    energy = {"noc+buffer": nbytes * 8 * (buf.read_energy_pj_per_bit + buf.write_energy_pj_per_bit)}
    if offchip:
        energy["offchip"] = nbytes * 8 * hw.chip.offchip_energy_pj_per_bit
    return ns, energy


def scatter(hw: CIMHardware, nbytes):
    """Input codes sent from the global buffer over a core's link into its local buffer.

    Returns
    -------
    ns, energy_pj
    """
    ns = _ceil(np.asarray(nbytes) * 8 / link_bits(hw)) * hw.cycle_ns
    per_bit = (hw.chip.noc.energy_pj_per_bit_hop + hw.core.local_buffer.write_energy_pj_per_bit
               + hw.chip.global_buffer.read_energy_pj_per_bit)
    if hw.system.chips > 1:
        per_bit += hw.system.link_energy_pj_per_bit
    e = nbytes * 8 * per_bit
    return ns, e


def fetch(hw: CIMHardware, nbytes):
    """Constant weights brought over the off-chip interface into the global buffer.

    Returns
    -------
    ns, energy_pj
    """
    ns = _ceil(np.asarray(nbytes) * 8 / hw.chip.offchip_bandwidth_bits) * hw.cycle_ns
    e = nbytes * 8 * (hw.chip.offchip_energy_pj_per_bit + hw.chip.global_buffer.write_energy_pj_per_bit)
    return ns, e


# --------------------------------------------------------------------------- static power
def leakage_terms_mw(hw: CIMHardware) -> dict[str, float]:
    """Static power of the whole accelerator, every chip, by part (mW; times ns gives pJ).

    Static power is drawn over the whole run, by every unit whether it works
    or idles (PUMA's and pimsim-nn's model, PIMCOMP's profiler: leakage power
    times running time).

    Returns
    -------
    dict
        ``crossbars``: every crossbar's ADCs, DACs and the rest of its
        periphery (``crossbar.adc_leakage_mw x adcs + dac_leakage_mw x rows +
        leakage_mw``); ``cores``: every core's local buffer and ALU; ``chip``:
        each chip's global buffer, ALU and everything else (``chip.leakage_mw``).
    """
    xb = hw.crossbar
    per_xb = xb.adcs * xb.adc_leakage_mw + xb.rows * xb.dac_leakage_mw + xb.leakage_mw
    n = hw.system.chips
    return {
        "crossbars": n * hw.chip.cores * hw.core.crossbars * per_xb,
        "cores": n * hw.chip.cores * (hw.core.local_buffer.leakage_mw + hw.core.alu.leakage_mw),
        "chip": n * (hw.chip.leakage_mw + hw.chip.global_buffer.leakage_mw + hw.chip.alu.leakage_mw),
    }


def leakage_mw(hw: CIMHardware) -> float:
    """Static power of the whole accelerator, every chip (mW; times ns gives pJ): the sum of
    :func:`leakage_terms_mw`."""
    t = leakage_terms_mw(hw)
    return t["chip"] + t["cores"] + t["crossbars"]


# --------------------------------------------------------------------------- dual-mode arrays (CMSwitch)
def memory_access(hw: CIMHardware, nbytes, arrays: int, write: bool):
    """A load from (or store into) ``arrays`` dual-mode arrays in memory mode, in parallel.

    ``arrays`` may be fractional: the share of their bandwidth an access gets
    when other accesses use the same arrays (the compiler's estimate).

    Returns
    -------
    ns : float or numpy.ndarray
    energy : dict
        pJ by component: ``xbmem``.
    """
    dm = hw.dual_mode
    bits = (arrays if arrays > 0 else 1) * dm.memory_bandwidth_bits  # fractional: a share of their time
    ns = _ceil(np.asarray(nbytes) * 8 / bits) * hw.cycle_ns
    per_bit = dm.memory_write_energy_pj_per_bit if write else dm.memory_read_energy_pj_per_bit
    return ns, {"xbmem": nbytes * 8 * per_bit}


def writeback(hw: CIMHardware, nbytes, arrays, offchip: bool):
    """Live data read out of ``arrays`` memory-mode arrays and written to the global buffer (or off-chip).

    CMSwitch's T^wb: the two sides stream, so it lasts as long as the slower one.

    Returns
    -------
    ns : float or numpy.ndarray
    energy : dict
        pJ by component: ``xbmem`` (the reads), ``noc+buffer`` and, off-chip, ``offchip``.
    """
    t_mem, e_mem = memory_access(hw, nbytes, arrays, write=False)
    t_buf, e_buf = load_store(hw, nbytes, offchip)
    return np.maximum(t_mem, t_buf), {**e_buf, **e_mem}


def switch(hw: CIMHardware, arrays: int, to_memory: bool):
    """``CM.switch`` of ``arrays`` arrays at once (TOM if ``to_memory`` else TOC).

    Returns
    -------
    ns, energy_pj
    """
    dm = hw.dual_mode
    cycles = dm.to_memory_cycles if to_memory else dm.to_compute_cycles
    e = dm.to_memory_energy_pj if to_memory else dm.to_compute_energy_pj
    return cycles * hw.cycle_ns, arrays * e


def write_rounds(hw: CIMHardware, arrays) -> int:
    """Rounds needed to program ``arrays`` arrays through the chip's write ports (1 when unlimited)."""
    ports = hw.dual_mode.write_ports
    return 1 if not ports else max(1, -(-int(arrays) // ports))


def switchable(hw: CIMHardware, xbs) -> bool:
    """Whether every crossbar of ``xbs`` can switch mode (ids ``0 .. switchable_arrays - 1``)."""
    return all(0 <= int(x) < hw.dual_mode.switchable_arrays for x in xbs)
