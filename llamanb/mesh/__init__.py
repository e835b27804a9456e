"""An emulated Tenstorrent Galaxy: a mesh of devices, collectives along one axis, tensor-parallel
Llama layers, and the accounting that scales them up to Llama 3 70B on 8x4.

    config.py   MeshConfig: the mesh's shape and which axis carries which split
    device.py   EmulatedMesh and MeshTensor: one numpy array per device, replicated or sharded
    ccl.py      all_gather / reduce_scatter / all_reduce along one cluster_axis, with their traffic
    layers.py   tensor-parallel attention and MLP on a mesh (the demo's placement)
    backend.py  backend "galaxy-emulated" on the engine seam; the real ttnn path, imported lazily
    cost.py     per-device bytes and a latency model for Llama 3 70B on a Galaxy
    bounds.py   derived float32 error bounds (gamma_K |A||B|) for comparing two evaluations
    ttlang.py   the decode layer's matmuls as TT-Lang kernels on tt-lang-sim, collectives via ttnnsim
    ttnnsim_mesh.py  a ttnn module on tt-lang-sim's simulated ttnn, for TtnnMeshBackend
"""
