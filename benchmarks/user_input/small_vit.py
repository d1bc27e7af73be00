"""The small vision Transformer of the benchmarks' user scripts (watch_diverging_on_gpu.py,
tune_debug_settings.py), as source text to write into a script: it expects `keras`, `dim` and
`depth` in scope and leaves `model` built, uncompiled (4 blocks of 192 on 8x8 patches of 32x32
uint8 images, 1.8 M parameters)."""

MODEL = '''
def block(h, heads=3):
    a = keras.layers.LayerNormalization()(h)
    a = keras.layers.MultiHeadAttention(heads, dim // heads)(a, a)
    h = h + a
    m = keras.layers.LayerNormalization()(h)
    m = keras.layers.Dense(4 * dim, activation="gelu")(m)
    return h + keras.layers.Dense(dim)(m)


inputs = keras.Input((32, 32, 3), dtype="uint8")
h = keras.layers.Rescaling(1 / 255)(inputs)
h = keras.layers.Conv2D(dim, 4, strides=4)(h)           # 8x8 patches of 4x4
h = keras.layers.Reshape((64, dim))(h)
for _ in range(depth):
    h = block(h)
h = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(h))
outputs = keras.layers.Dense(10, dtype="float32")(h)
model = keras.Model(inputs, outputs, name="small_vit")
'''
