// torch.optim's defaults, where OmniLearn follows them: the server's optimizer flags and
// the C++ worker's --optimizer flags leave out what torch.optim leaves out.
#ifndef OMNILEARN_COMMON_TORCH_OPTIM_DEFAULTS_H_
#define OMNILEARN_COMMON_TORCH_OPTIM_DEFAULTS_H_

namespace omnilearn {
namespace torch_optim {

inline constexpr double kLearningRate = 1e-3;  // SGD (torch >= 2.2), Adam, AdamW
inline constexpr double kMomentum = 0;         // SGD
inline constexpr double kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8;
inline constexpr double kWeightDecay = 0;          // SGD, Adam
inline constexpr double kAdamWWeightDecay = 1e-2;  // AdamW

}  // namespace torch_optim
}  // namespace omnilearn

#endif  // OMNILEARN_COMMON_TORCH_OPTIM_DEFAULTS_H_
