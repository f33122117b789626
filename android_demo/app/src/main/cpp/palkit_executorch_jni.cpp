// JNI for io.palkit.demo.runtime.ExecuTorchProgram: one task program (.pte) whose trunk weights
// live in a shared data file (.ptd). Plain JNI, no fbjni, so the Kotlin side stays tiny.
#include <jni.h>

#include <memory>
#include <string>
#include <vector>

#include <executorch/extension/module/module.h>
#include <executorch/extension/tensor/tensor.h>
#include <executorch/extension/threadpool/threadpool.h>

using executorch::extension::Module;
using executorch::extension::from_blob;
using executorch::runtime::Error;

namespace {

std::string toString(JNIEnv* env, jstring s) {
  const char* chars = env->GetStringUTFChars(s, nullptr);
  std::string out(chars);
  env->ReleaseStringUTFChars(s, chars);
  return out;
}

void throwRuntime(JNIEnv* env, const std::string& message) {
  env->ThrowNew(env->FindClass("java/lang/IllegalStateException"), message.c_str());
}

std::vector<int64_t> toVector(JNIEnv* env, jlongArray array) {
  std::vector<int64_t> out(env->GetArrayLength(array));
  env->GetLongArrayRegion(array, 0, static_cast<jsize>(out.size()),
                          reinterpret_cast<jlong*>(out.data()));
  return out;
}

}  // namespace

extern "C" JNIEXPORT jlong JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeLoad(
    JNIEnv* env, jclass, jstring programPath, jstring dataPath, jint threads) {
  if (threads > 0) {
    if (auto* pool = executorch::extension::threadpool::get_threadpool()) {
      pool->_unsafe_reset_threadpool(threads);
    }
  }
  // Mmap: the trunk file is mapped, not copied, so every task program shares its pages.
  auto module = std::make_unique<Module>(
      toString(env, programPath),
      std::vector<std::string>{toString(env, dataPath)},
      Module::LoadMode::Mmap);
  const Error error = module->load_method("forward");
  if (error != Error::Ok) {
    throwRuntime(env, "ExecuTorch could not load forward() of " + toString(env, programPath) +
                          " (error " + std::to_string(static_cast<int>(error)) + ")");
    return 0;
  }
  return reinterpret_cast<jlong>(module.release());
}

extern "C" JNIEXPORT jfloatArray JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeForward(
    JNIEnv* env, jclass, jlong handle, jlongArray inputIds, jlongArray attentionMask,
    jlongArray tokenTypeIds) {
  auto* module = reinterpret_cast<Module*>(handle);
  std::vector<int64_t> ids = toVector(env, inputIds);
  std::vector<int64_t> mask = toVector(env, attentionMask);
  std::vector<int64_t> types = toVector(env, tokenTypeIds);
  const auto seq = static_cast<executorch::aten::SizesType>(ids.size());
  // Input order is the manifest's io.inputs order: input_ids, attention_mask, token_type_ids.
  auto result = module->forward({
      from_blob(ids.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(mask.data(), {1, seq}, executorch::aten::ScalarType::Long),
      from_blob(types.data(), {1, seq}, executorch::aten::ScalarType::Long),
  });
  if (!result.ok()) {
    throwRuntime(env, "ExecuTorch forward failed (error " +
                          std::to_string(static_cast<int>(result.error())) + ")");
    return nullptr;
  }
  const auto& logits = result->at(0).toTensor();
  jfloatArray out = env->NewFloatArray(static_cast<jsize>(logits.numel()));
  env->SetFloatArrayRegion(out, 0, static_cast<jsize>(logits.numel()),
                           logits.const_data_ptr<float>());
  return out;
}

extern "C" JNIEXPORT void JNICALL
Java_io_palkit_demo_runtime_ExecuTorchProgram_nativeFree(JNIEnv*, jclass, jlong handle) {
  delete reinterpret_cast<Module*>(handle);
}
