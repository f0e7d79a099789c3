import numba, numpy as np, time, re
def make(body):
    ns={}
    exec(body, {"numba":numba,"np":np}, ns)
    return list(ns.values())[0]
variants = {
"uint_all": '''
@numba.njit(fastmath={"contract","reassoc"})
def f(a0,a1,a2,a3,xf,base,s,lo,hi,w0,w1,w2,w3):
    for ow in range(lo, hi):
        o = np.uint64(ow)
        v = xf[np.uint64(base + ow * s)]
        a0[o] += w0 * v
        a1[o] += w1 * v
        a2[o] += w2 * v
        a3[o] += w3 * v
''',
"uint_all_unitstride": '''
@numba.njit(fastmath={"contract","reassoc"})
def f(a0,a1,a2,a3,xf,base,s,lo,hi,w0,w1,w2,w3):
    for ow in range(lo, hi):
        o = np.uint64(ow)
        v = xf[np.uint64(base + ow)]
        a0[o] += w0 * v
        a1[o] += w1 * v
        a2[o] += w2 * v
        a3[o] += w3 * v
''',
"acc2d_uint": '''
@numba.njit(fastmath={"contract","reassoc"})
def f(acc,xf,base,s,lo,hi,w0,w1,w2,w3):
    for ow in range(lo, hi):
        o = np.uint64(ow)
        v = xf[np.uint64(base + ow * s)]
        acc[0, o] += w0 * v
        acc[1, o] += w1 * v
        acc[2, o] += w2 * v
        acc[3, o] += w3 * v
''',
}
xf=np.random.rand(3000).astype(np.float32)
for name, body in variants.items():
    f = make(body)
    if name.startswith("acc2d"):
        args=(np.zeros((4,1000),np.float32),xf,0,2,0,1000,np.float32(1),np.float32(2),np.float32(3),np.float32(4))
    else:
        args=(*[np.zeros(1000,np.float32) for _ in range(4)],xf,0,2,0,1000,np.float32(1),np.float32(2),np.float32(3),np.float32(4))
    f(*args)
    asm = list(f.inspect_asm().values())[0]
    t=time.perf_counter()
    for _ in range(20000): f(*args)
    dt=(time.perf_counter()-t)/20000
    print(name, "zmm", len(re.findall(r"vfmadd\w+ps\s+.*zmm", asm)), "ymm", len(re.findall(r"vfmadd\w+ps\s+.*ymm", asm)), "scalar", len(re.findall(r"vfmadd\w+ss", asm)), "GF/s", round(8*1000/dt/1e9,1))
