// The few pieces of the C++ standard library that libew's device code uses. nvcc builds take them
// from the standard headers; NVRTC, which compiles fused formulas at run time (pyew/jit.py) from
// these same headers, ships no standard library, so there they are defined here. (CCCL's
// cuda/std headers would do, but they add about a second to every run-time compile.)
#pragma once
#ifndef __CUDACC_RTC__
#include <cstdint>
#include <type_traits>
#include <utility>
#else
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
#define INT32_MAX 2147483647

namespace std {
template <class T, T v>
struct integral_constant {
  static constexpr T value = v;
  using value_type = T;
  using type = integral_constant;
  constexpr operator T() const { return v; }
};
using true_type = integral_constant<bool, true>;
using false_type = integral_constant<bool, false>;

template <class A, class B> struct is_same : false_type {};
template <class A> struct is_same<A, A> : true_type {};
template <class A, class B> inline constexpr bool is_same_v = is_same<A, B>::value;

template <class T> struct remove_cv { using type = T; };
template <class T> struct remove_cv<const T> { using type = T; };
template <class T> struct remove_cv<volatile T> { using type = T; };
template <class T> struct remove_cv<const volatile T> { using type = T; };

template <class T> struct is_integral_base : false_type {};
template <> struct is_integral_base<bool> : true_type {};
template <> struct is_integral_base<char> : true_type {};
template <> struct is_integral_base<signed char> : true_type {};
template <> struct is_integral_base<unsigned char> : true_type {};
template <> struct is_integral_base<short> : true_type {};
template <> struct is_integral_base<unsigned short> : true_type {};
template <> struct is_integral_base<int> : true_type {};
template <> struct is_integral_base<unsigned> : true_type {};
template <> struct is_integral_base<long> : true_type {};
template <> struct is_integral_base<unsigned long> : true_type {};
template <> struct is_integral_base<long long> : true_type {};
template <> struct is_integral_base<unsigned long long> : true_type {};
template <class T> struct is_integral : is_integral_base<typename remove_cv<T>::type> {};
template <class T> inline constexpr bool is_integral_v = is_integral<T>::value;

template <class T> struct make_unsigned { using type = T; };
template <> struct make_unsigned<signed char> { using type = unsigned char; };
template <> struct make_unsigned<char> { using type = unsigned char; };
template <> struct make_unsigned<short> { using type = unsigned short; };
template <> struct make_unsigned<int> { using type = unsigned; };
template <> struct make_unsigned<long> { using type = unsigned long; };
template <> struct make_unsigned<long long> { using type = unsigned long long; };
template <class T> using make_unsigned_t = typename make_unsigned<T>::type;

template <bool B, class T, class F> struct conditional { using type = T; };
template <class T, class F> struct conditional<false, T, F> { using type = F; };
template <bool B, class T, class F> using conditional_t = typename conditional<B, T, F>::type;

template <bool B, class T = void> struct enable_if {};
template <class T> struct enable_if<true, T> { using type = T; };
template <bool B, class T = void> using enable_if_t = typename enable_if<B, T>::type;

template <class...> using void_t = void;

// (arithmetic types only, the one use)
template <class A, class B> struct common_type { using type = decltype(true ? A() : B()); };
template <class A, class B> using common_type_t = typename common_type<A, B>::type;

template <class T, T... I> struct integer_sequence { static constexpr size_t size() { return sizeof...(I); } };
template <size_t... I> using index_sequence = integer_sequence<size_t, I...>;
template <size_t N, size_t... I> struct make_index_seq : make_index_seq<N - 1, N - 1, I...> {};
template <size_t... I> struct make_index_seq<0, I...> { using type = index_sequence<I...>; };
template <size_t N> using make_index_sequence = typename make_index_seq<N>::type;
template <class... T> using index_sequence_for = make_index_sequence<sizeof...(T)>;

}  // namespace std
#endif

namespace ew {
// min, max and clamp without <algorithm>, which every unit would otherwise parse for these three
// (about a tenth of a unit's preprocessed text).
template <class T> constexpr T min_of(T a, T b) { return b < a ? b : a; }
template <class T> constexpr T max_of(T a, T b) { return a < b ? b : a; }
template <class T> constexpr T clamp_to(T v, T lo, T hi) { return v < lo ? lo : hi < v ? hi : v; }

// The largest of its arguments, at compile time (std::max of an initializer list is not available
// to NVRTC).
template <typename T>
constexpr T cmax(T a) { return a; }
template <typename T, typename... Ts>
constexpr T cmax(T a, Ts... rest) {
  const T b = cmax(rest...);
  return a < b ? b : a;
}
}  // namespace ew
