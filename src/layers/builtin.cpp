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
void register_input_layer();           // Input
void register_mnist_data_layer();      // MnistData

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
  register_input_layer();
  register_mnist_data_layer();
}

}  // namespace lamina
