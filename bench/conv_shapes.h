/* conv_shapes.h: the convolutions of bench/conv's two networks at batch 64,
 * one CONV line per distinct shape (bench/CMakeLists.txt reads these lines
 * too, to make three models per shape):
 *
 *   CONV(ID, CNN, RESNET, FIRST, N, C, H, W, O, K, STRIDE, PAD)
 *
 * input [N, C, H, W], weight [O, C, K, K], no groups nor dilation; CNN and
 * RESNET count the shape's convolutions in one step of examples/cnn.dt and
 * bench/resnet.dt; FIRST is 1 when the input is the model's input, whose
 * gradient the step does not take. A training step makes each convolution's
 * forward, its weight gradient and, unless FIRST, its input gradient:
 * 2 N O Ho Wo C K K flops each. */
CONV(c1_16_28, 1, 1, 1, 64, 1, 28, 28, 16, 3, 1, 1)       /* cnn conv1, resnet stem */
CONV(c16_32_14, 1, 0, 0, 64, 16, 14, 14, 32, 3, 1, 1)     /* cnn conv2 */
CONV(c16_16_28, 0, 6, 0, 64, 16, 28, 28, 16, 3, 1, 1)     /* layer1's */
CONV(c16_32_28s2, 0, 1, 0, 64, 16, 28, 28, 32, 3, 2, 1)   /* layer2_0.conv1 */
CONV(c16_32_28s2k1, 0, 1, 0, 64, 16, 28, 28, 32, 1, 2, 0) /* layer2_0.shortcut */
CONV(c32_32_14, 0, 5, 0, 64, 32, 14, 14, 32, 3, 1, 1)     /* layer2's others */
CONV(c32_64_14s2, 0, 1, 0, 64, 32, 14, 14, 64, 3, 2, 1)   /* layer3_0.conv1 */
CONV(c32_64_14s2k1, 0, 1, 0, 64, 32, 14, 14, 64, 1, 2, 0) /* layer3_0.shortcut */
CONV(c64_64_7, 0, 5, 0, 64, 64, 7, 7, 64, 3, 1, 1)        /* layer3's others */
