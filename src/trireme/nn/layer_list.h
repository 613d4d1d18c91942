// LayerList: an ordered list of child modules named "0", "1", ... (as PyTorch's ModuleList).
//
//   auto h = std::make_shared<nn::LayerList>();
//   for (int i = 0; i < n_layer; ++i) h->push_back(std::make_shared<nn::TransformerDecoderLayer>(...));
//   for (auto& layer : h->as<nn::TransformerDecoderLayer>()) x = layer->forward(x);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trireme/nn/module.h"

namespace trireme::nn {

class LayerList : public Module {
 public:
  LayerList() : Module("LayerList") {}

  template <class M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    register_module(std::to_string(layers_.size()), module);
    layers_.push_back(module);
    return module;
  }
  size_t size() const { return layers_.size(); }
  bool empty() const { return layers_.empty(); }
  const std::shared_ptr<Module>& operator[](size_t i) const {
    TRIREME_CHECK(i < layers_.size(), "LayerList: index ", i, " out of range for ", layers_.size(), " layers");
    return layers_[i];
  }
  // The layers cast to M (checked: a layer of another type is an error).
  template <class M>
  std::vector<std::shared_ptr<M>> as() const {
    std::vector<std::shared_ptr<M>> out;
    for (size_t i = 0; i < layers_.size(); ++i) {
      auto m = std::dynamic_pointer_cast<M>(layers_[i]);
      TRIREME_CHECK(m != nullptr, "LayerList: layer ", i, " is a ", layers_[i]->type_name(),
                    ", not the requested type");
      out.push_back(std::move(m));
    }
    return out;
  }
  auto begin() const { return layers_.begin(); }
  auto end() const { return layers_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> layers_;
};

}  // namespace trireme::nn
