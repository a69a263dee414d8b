"""The warp-specialized kernel's probe sets (data only; ``generator`` hashes them, as its own): for
each feature of the kernel, "<name>_PROBES" (workload, knob changes from generator's base config)
and "<name>_FINGERPRINTS" (version -> fingerprint), keyed by the conv2d task's version, or the
dense task's for the DENSE_ ones.  Never edit a set whose fingerprint is recorded."""

# The warp-specialized kernel (warp_specialized=1, and 2: persistent): A as row boxes (with a
# stride), a spatial TMA tile, a matrix box and gathered; 1-2 consumers; groups in flight or not;
# fp16 output; dilation; both weight layouts, an odd N.  Keyed by each task's version as above.
# (On the wgmma path: generator's _WGMMA, offsets 0, a 4-warp warpgroup, chunk 4.)
_WS = dict(offset_a=0, offset_b=0, intrinsic="wgmma", block_row_warps=4, chunk=4, warp_specialized=1, vec_c=1,
           offset_c=0, warp_col_tiles=8, warp_row_tiles=2, stages=4, wgmma_in_flight=1)
WS_FINGERPRINTS = {
    # Replaced in place (2026-11-23) when strided convs' A became row boxes: no log in the
    # repository held a warp-specialized conv2d record of the old code.
    1: "8917c5c60aa35396e49fc08ed6da4216296b70618c143162747c12f25f2dcb70",
}
WS_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b32", dict(_WS)),
    ("rfc-3x3-b32", dict(_WS, block_col_warps=1, stages=3)),
    ("rfc-1x1-b32", dict(_WS, wgmma_in_flight=0)),
    ("resnet50-res3-1x1-256-512-s2-b1", dict(_WS, block_col_warps=1, warp_row_tiles=1, stages=2)),
    ("n=2,h=9,w=11,c=64,k=32,r=3,s=3,pad=2,dilation=2,out_dtype=float16",
     dict(_WS, block_col_warps=1, warp_col_tiles=4, stages=3)),
    ("rfc-3x3-b32", dict(_WS, warp_specialized=2)),  # persistent
    ("resnet50-res3-1x1-256-512-s2-b1", dict(_WS, warp_specialized=2, block_col_warps=1, wgmma_in_flight=0)),
)
DENSE_WS_FINGERPRINTS = {
    2: "45b8e3bc8f0a0024660be5fe7d883595b3fc6c43545d371a33d20f2d2a89178b",
}
DENSE_WS_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=256,n=512,k=512,b=nk", dict(_WS)),
    ("dense:m=130,n=75,k=520,b=nk,out_dtype=float16", dict(_WS, block_col_warps=1, warp_col_tiles=4, stages=3)),
    ("dense:m=130,n=192,k=520", dict(_WS, block_col_warps=1, wgmma_in_flight=0, stages=2)),
    ("dense:m=1000,n=1024,k=512,b=nk", dict(_WS, warp_specialized=2)),  # persistent, 64 tiles < 132 blocks
)


# Warp-specialized split-K (a cluster of blocks along K summing through distributed shared
# memory): slices of uneven length, tails, both weight layouts, fp16 output, waiting and in flight.
WS_SPLIT_FINGERPRINTS = {
    1: "675be0b445e0f7e3370ba44e32e79bb8516f8f7376a79bbc9ffd7dbfdf409e3f",
}
WS_SPLIT_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b1", dict(_WS, block_col_warps=1, split_k=8)),
    ("n=2,h=9,w=11,c=64,k=32,r=3,s=3,pad=2,dilation=2,out_dtype=float16",
     dict(_WS, block_col_warps=1, warp_col_tiles=4, stages=3, split_k=2, wgmma_in_flight=0)),
)
DENSE_WS_SPLIT_FINGERPRINTS = {
    2: "59f7dd00d5fcfb9caa50510c0596ec047f5a04f2c08a9e139fcb0da42cf2fc43",
}
DENSE_WS_SPLIT_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=16,n=4096,k=4096,b=nk", dict(_WS, block_col_warps=1, warp_row_tiles=1, split_k=4)),
    ("dense:m=100,n=200,k=520,b=kn,out_dtype=float16", dict(_WS, stages=3, split_k=2, wgmma_in_flight=0)),
)

# Consumers along M (consumers_along_m=1: each of 2 consumer warpgroups takes half the rows and a
# wgmma of all block_n columns): m64n256 and m64n128, spatial and row boxes, a gathered A, a split
# cluster, persistent; tails, both weight layouts, fp16 output.
_ALONG_M = dict(_WS, consumers_along_m=1)
WS_ALONG_M_FINGERPRINTS = {
    1: "ef4448a3b9a961a970fe8c784f8ed9181288dd90916401b9dc84e63ad78b34bf",
}
WS_ALONG_M_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b256", dict(_ALONG_M)),
    ("tutorial", dict(_ALONG_M, warp_col_tiles=4, warp_specialized=2)),
    ("resnet50-res3-3x3-128-128-s2-b32", dict(_ALONG_M, warp_col_tiles=4, stages=3)),
    ("n=2,h=9,w=11,c=64,k=72,r=3,s=3,pad=2,dilation=2,out_dtype=float16", dict(_ALONG_M, warp_col_tiles=4)),
    ("rfc-3x3-b1", dict(_ALONG_M, warp_col_tiles=4, split_k=4, wgmma_in_flight=0)),
)
DENSE_WS_ALONG_M_FINGERPRINTS = {
    2: "e2cb19319e56b7f2303bc412d31557a979cf55242d20c055ed971ab86d77da69",
}
DENSE_WS_ALONG_M_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=256,n=512,k=512,b=nk", dict(_ALONG_M)),
    ("dense:m=130,n=200,k=520,b=kn,out_dtype=float16", dict(_ALONG_M, stages=3, warp_specialized=2)),
    ("dense:m=128,n=4096,k=4096,b=nk", dict(_ALONG_M, warp_col_tiles=4, split_k=2)),
)

# B multicast to a pair of blocks along M (multicast_b=1): both weight layouts, an odd number of M
# tiles (a partner past M), spatial and row boxes, a gathered A, consumers along M, waiting.
_MULTICAST = dict(_WS, multicast_b=1)
WS_MULTICAST_FINGERPRINTS = {
    1: "e68094fb904239449642868f5d07741b4ae8dcc55b97fd56a79e4df2109754c4",
}
WS_MULTICAST_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b256", dict(_MULTICAST, consumers_along_m=1)),
    ("rfc-3x3-b1", dict(_MULTICAST, block_col_warps=1, warp_col_tiles=4, warp_row_tiles=1)),
    ("resnet50-res3-3x3-128-128-s2-b32", dict(_MULTICAST, warp_col_tiles=4, stages=3, wgmma_in_flight=0)),
    ("n=2,h=9,w=11,c=64,k=72,r=3,s=3,pad=2,dilation=2,out_dtype=float16", dict(_MULTICAST, warp_col_tiles=4)),
)
DENSE_WS_MULTICAST_FINGERPRINTS = {
    2: "121bd338feb1ebd783d03d0b7c99978cf9bb4416e3d3575ecdea1c49a08b2bf3",
}
DENSE_WS_MULTICAST_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=2048,n=4096,k=4096,b=nk", dict(_MULTICAST, consumers_along_m=1)),
    ("dense:m=330,n=200,k=520,b=kn,out_dtype=float16", dict(_MULTICAST, stages=3)),
)


# Ping-pong (ping_pong=1: two consumer warpgroups of a persistent block take whole tiles in turn):
# both weight layouts, spatial and row boxes, a matrix box and a gathered A, 64- and 128-row tiles,
# fp16 output, waiting.
_PING_PONG = dict(_WS, warp_specialized=2, block_col_warps=1, ping_pong=1)
WS_PING_PONG_FINGERPRINTS = {
    1: "0201b28d2e7cdb1fbde3eb47e1abde67f3c8642cee3b2f525153f16700b95ae4",
}
WS_PING_PONG_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-3x3-b256", dict(_PING_PONG)),
    ("rfc-1x1-b256", dict(_PING_PONG, wgmma_in_flight=0, stages=3)),
    ("n=32,h=65,w=65,c=128,k=128,r=3,s=3,stride=2,pad=1,out_dtype=float16", dict(_PING_PONG, warp_col_tiles=4)),
    ("n=32,h=28,w=28,c=72,k=128,r=3,s=3,pad=1", dict(_PING_PONG, warp_row_tiles=1)),
)
DENSE_WS_PING_PONG_FINGERPRINTS = {
    2: "51917511769c9703b1f879ae4c6b2971c4baaaa8af0e563e3c37e994364e7408",
}
DENSE_WS_PING_PONG_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=2048,n=4096,k=4096,b=nk", dict(_PING_PONG)),
    ("dense:m=1000,n=1032,k=520,b=kn,out_dtype=float16", dict(_PING_PONG, warp_row_tiles=1, warp_col_tiles=4,
                                                               stages=3)),
)


# A by TMA im2col (tma_im2col=1, convs only): 3x3 along M persistent, an asymmetric strided 3x5
# with asymmetric padding, dilation in 4 K slices, a 1x1 stride-2 (not a matrix), ping-pong,
# B multicast, fp16 output, waiting.
_IM2COL = dict(_WS, tma_im2col=1)
WS_IM2COL_FINGERPRINTS = {
    1: "0e1ef2de8637be9ccb63ccab1b8963f4156744b67f54ee4fa626680f2dd496c7",
}
WS_IM2COL_PROBES: tuple[tuple[str, dict], ...] = (
    ("tutorial", dict(_IM2COL, block_col_warps=2, warp_specialized=2, consumers_along_m=1)),
    ("n=3,h=17,w=23,c=64,k=128,r=3,s=5,pad=1x2,stride=2x1,out_dtype=float16", dict(_IM2COL)),
    ("n=5,h=20,w=13,c=128,k=64,r=3,s=3,pad=2,dilation=2", dict(_IM2COL, block_col_warps=1, warp_col_tiles=4,
                                                               warp_row_tiles=1, split_k=4, wgmma_in_flight=0)),
    ("resnet50-res3-1x1-256-512-s2-b1", dict(_IM2COL, block_col_warps=1, warp_specialized=2, ping_pong=1)),
    ("rfc-3x3-b256", dict(_IM2COL, block_col_warps=2, warp_col_tiles=4, multicast_b=1, stages=3)),
)

# C by TMA stores (tma_store=1): 1x1 by columns persistent, im2col along M persistent, ping-pong,
# gathered A, a dense with M and N tails and fp16 output, B multicast, waiting; each task's apart.
_STORE = dict(_WS, tma_store=1)
WS_TMA_STORE_FINGERPRINTS = {
    1: "4c153bd473fb4c20d2ba6d5c24846d8372d812ebb1fa150a681334076493aebe",
}
WS_TMA_STORE_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-1x1-b256", dict(_STORE, block_col_warps=2, warp_specialized=2, wgmma_in_flight=0)),
    ("tutorial", dict(_STORE, block_col_warps=2, warp_specialized=2, consumers_along_m=1, tma_im2col=1)),
    ("rfc-3x3-b256", dict(_STORE, block_col_warps=1, warp_specialized=2, ping_pong=1, tma_im2col=1)),
    ("n=2,h=9,w=11,c=16,k=32,r=3,s=3,pad=2,dilation=2", dict(_STORE, block_col_warps=1, warp_col_tiles=4, stages=3)),
)
DENSE_WS_TMA_STORE_FINGERPRINTS = {
    2: "26712c1e99b4a6f01da4211deb39995f2655fe6e1b66aa855ebe016b9767adc3",
}
DENSE_WS_TMA_STORE_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=100,n=200,k=136,b=nk,out_dtype=float16", dict(_STORE, block_col_warps=2, stages=3)),
    ("dense:m=330,n=200,k=520,b=kn", dict(_STORE, block_col_warps=2, stages=3, multicast_b=1)),
)

# Fused epilogues in the warp-specialized kernel: every part, from registers and through the TMA
# store's staging, an odd N (inputs read one by one), split-K, ping-pong; each task's apart.
WS_FUSED_FINGERPRINTS = {
    1: "df9040b95d134aac70116dce59efc70c6a932a644977d873e09558d4ce5f0f53",
}
WS_FUSED_PROBES: tuple[tuple[str, dict], ...] = (
    ("rfc-1x1-b32-scale_bias_residual_relu", dict(_STORE, block_col_warps=2, warp_specialized=2)),
    ("resnet50-res4-3x3-256-256-b32-bias_relu", dict(_WS, consumers_along_m=1, tma_im2col=1)),
)
DENSE_WS_FUSED_FINGERPRINTS = {
    2: "237cde43e7e6728024e4419697a4558ad82b367c71050a384f170a71ec587f59",
}
DENSE_WS_FUSED_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=100,n=200,k=136,b=nk,out_dtype=float16,epilogue=bias_residual_gelu", dict(_STORE, stages=3)),
    ("dense:m=200,n=75,k=520,b=nk,epilogue=scale_bias_residual_relu", dict(_WS, warp_col_tiles=4, stages=3)),
    ("dense:m=130,n=192,k=520,b=kn,out_dtype=float16,epilogue=residual", dict(_WS, block_col_warps=2,
                                                                              warp_col_tiles=4, stages=3, split_k=2)),
    ("dense:m=1000,n=1032,k=520,b=kn,epilogue=bias_gelu", dict(_STORE, block_col_warps=1, warp_row_tiles=1,
                                                               warp_col_tiles=4, stages=3, warp_specialized=2,
                                                               ping_pong=1)),
)

# Registers moved from the producer to the two consumer warpgroups (setmaxnreg=1): persistent
# im2col along M with TMA stores, ping-pong, unpersistent split by columns with split-K.
_MAXNREG = dict(_WS, setmaxnreg=1)
WS_SETMAXNREG_FINGERPRINTS = {
    1: "8933602f38609d0abba63b2dd734794f49e4aafb49caaa3fa4a28e7478584440",
}
WS_SETMAXNREG_PROBES: tuple[tuple[str, dict], ...] = (
    ("tutorial", dict(_MAXNREG, block_col_warps=2, warp_specialized=2, consumers_along_m=1, tma_im2col=1, tma_store=1)),
    ("rfc-3x3-b256", dict(_MAXNREG, block_col_warps=1, warp_specialized=2, ping_pong=1, tma_im2col=1)),
)
DENSE_WS_SETMAXNREG_FINGERPRINTS = {
    2: "10ca14480f2c51fe40673e511a2f9320874f881bde1e7ac806b5bb008e66d717",
}
DENSE_WS_SETMAXNREG_PROBES: tuple[tuple[str, dict], ...] = (
    ("dense:m=100,n=200,k=520,b=kn,out_dtype=float16", dict(_MAXNREG, block_col_warps=2, stages=3, split_k=2)),
)
