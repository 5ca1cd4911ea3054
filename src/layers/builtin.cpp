// Registers every layer type Lamina ships. Called once by the registry, so the built-in
// layers are there even when the library is linked statically.
#include "lamina/registry.hpp"

namespace lamina {

void register_linear_layer();          // Linear, InnerProduct
void register_activation_layers();     // ReLU, Sigmoid, TanH
void register_softmax_layers();        // Softmax, LogSoftmax
void register_softmax_loss_layer();    // SoftmaxWithLoss
void register_nll_loss_layer();        // NegativeLogLikelihood
void register_euclidean_loss_layer();  // EuclideanLoss
void register_accuracy_layer();        // Accuracy
void register_flatten_layer();         // Flatten
void register_reshape_layer();         // Reshape
void register_dropout_layer();         // Dropout
void register_split_layer();           // Split
void register_convert_layer();         // Convert
void register_input_layer();           // Input
void register_mnist_data_layer();      // MnistData
void register_data_layer();            // Data (LMDB, LevelDB)
void register_image_data_layer();      // ImageData (a list of JPEG/PNG files)
void register_convolution_layer();     // Convolution
void register_pooling_layer();         // Pooling
void register_batch_norm_layer();      // BatchNorm
void register_scale_layer();           // Scale
void register_bias_layer();            // Bias
void register_concat_layer();          // Concat
void register_eltwise_layer();         // Eltwise
// The Caffe catalogue.
void register_pointwise_layers();      // AbsVal, BNLL, Power, Exp, Log, Threshold, Clip,
                                       // Swish, ELU
void register_prelu_layer();           // PReLU
void register_mvn_layer();             // MVN
// --
// (Caffe's losses)
void register_sigmoid_cross_entropy_loss_layer();  // SigmoidCrossEntropyLoss
void register_hinge_loss_layer();                  // HingeLoss
void register_multinomial_logistic_loss_layer();   // MultinomialLogisticLoss
void register_contrastive_loss_layer();            // ContrastiveLoss
void register_infogain_loss_layer();               // InfogainLoss
// --
void register_lrn_layer();            // LRN
void register_deconvolution_layer();  // Deconvolution
void register_im2col_layer();         // Im2col
void register_spp_layer();            // SPP
// --
void register_slice_layer();          // Slice
void register_silence_layer();        // Silence
void register_crop_layer();           // Crop
void register_tile_layer();           // Tile
void register_reduction_layer();      // Reduction
void register_argmax_layer();         // ArgMax
void register_embed_layer();          // Embed
void register_batch_reindex_layer();  // BatchReindex
void register_filter_layer();  // Filter
void register_parameter_layer();      // Parameter
// --
// (Caffe's data: HDF5, memory, dummy)
void register_dummy_data_layer();     // DummyData
void register_memory_data_layer();    // MemoryData
void register_hdf5_data_layer();      // HDF5Data
void register_hdf5_output_layer();    // HDF5Output
// --

void register_builtin_layers() {
  register_linear_layer();
  register_activation_layers();
  register_softmax_layers();
  register_softmax_loss_layer();
  register_nll_loss_layer();
  register_euclidean_loss_layer();
  register_accuracy_layer();
  register_flatten_layer();
  register_reshape_layer();
  register_dropout_layer();
  register_split_layer();
  register_convert_layer();
  register_input_layer();
  register_mnist_data_layer();
  register_data_layer();
  register_image_data_layer();
  register_convolution_layer();
  register_pooling_layer();
  register_batch_norm_layer();
  register_scale_layer();
  register_bias_layer();
  register_concat_layer();
  register_eltwise_layer();
  register_pointwise_layers();
  register_prelu_layer();
  register_mvn_layer();
  // --
  // (Caffe's losses)
  register_sigmoid_cross_entropy_loss_layer();
  register_hinge_loss_layer();
  register_multinomial_logistic_loss_layer();
  register_contrastive_loss_layer();
  register_infogain_loss_layer();
  // --
  register_lrn_layer();
  register_deconvolution_layer();
  register_im2col_layer();
  register_spp_layer();
  // --
  register_slice_layer();
  register_silence_layer();
  register_crop_layer();
  register_tile_layer();
  register_reduction_layer();
  register_argmax_layer();
  register_embed_layer();
  register_batch_reindex_layer();
  register_filter_layer();
  register_parameter_layer();
  // --
  // (Caffe's data: HDF5, memory, dummy)
  register_dummy_data_layer();
  register_memory_data_layer();
  register_hdf5_data_layer();
  register_hdf5_output_layer();
  // --
}

}  // namespace lamina
