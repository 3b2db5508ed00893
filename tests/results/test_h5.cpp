// results/h5: round trips of every dtype, attributes, float16/bf16 decoding and error messages.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>

#include "results/h5.hpp"
#include "results/h5_test_util.hpp"
#include "support/test_support.hpp"

using namespace fp8moe;
using fp8moe::test::TempDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

template <class T>
Tensor<T> random_ints(std::vector<std::int64_t> shape, std::uint64_t seed) {
  Tensor<T> t(std::move(shape));
  std::mt19937_64 rng(seed);
  for (auto& x : t.data) x = static_cast<T>(rng());
  return t;
}

template <class T>
bool same_bits(const Tensor<T>& a, const Tensor<T>& b) {
  return a.shape == b.shape && a.data.size() == b.data.size() &&
         (a.data.empty() || std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(T)) == 0);
}

// Independent half oracle: arithmetic on the fields rather than fp32 bit assembly.
double half_value(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return s ? -mag : mag;
}

}  // namespace

TEST_CASE("every dtype round-trips bitwise, in the root and in a subgroup") {
  const std::uint64_t seed = test::seed_for(101);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string path = dir.file("roundtrip.h5");

  const TensorF f32 = test::random_tensor({5, 256}, seed, 1);
  TensorD f64({3, 4, 5});
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 3.0);
  for (auto& x : f64.data) x = normal(rng);
  const auto u8 = random_ints<std::uint8_t>({7, 9}, seed + 1);
  const auto u16 = random_ints<std::uint16_t>({2, 3, 11}, seed + 2);
  const auto i32 = random_ints<std::int32_t>({13}, seed + 3);
  const auto i64 = random_ints<std::int64_t>({4, 2}, seed + 4);
  const TensorF empty({0, 7});
  TensorD scalar(std::vector<std::int64_t>{});
  scalar.data[0] = normal(rng);

  {
    h5::File f = h5::File::create(path);
    f.write("f32", f32);
    f.write("f64", f64);
    f.write("u8", u8);
    f.write("u16", u16);
    f.write("i32", i32);
    f.write("i64", i64);
    f.write("empty", empty);
    f.write("scalar", scalar);
    h5::Group g = f.create_group("sub");
    g.create_group("deeper").write("f32", f32);
    f.close();
  }
  const h5::File f = h5::File::open(path);
  CHECK(same_bits(f.read_exact<float>("f32"), f32));
  CHECK(same_bits(f.read_exact<double>("f64"), f64));
  CHECK(same_bits(f.read_exact<std::uint8_t>("u8"), u8));
  CHECK(same_bits(f.read_exact<std::uint16_t>("u16"), u16));
  CHECK(same_bits(f.read_exact<std::int32_t>("i32"), i32));
  CHECK(same_bits(f.read_exact<std::int64_t>("i64"), i64));
  CHECK(same_bits(f.read_exact<float>("empty"), empty));
  CHECK(same_bits(f.read_exact<double>("scalar"), scalar));
  CHECK(same_bits(f.read_f32("f32"), f32));
  CHECK(same_bits(f.open_group("sub").open_group("deeper").read_f32("f32"), f32));
  CHECK(same_bits(f.read_f32("sub/deeper/f32"), f32));
  CHECK(same_bits(f.read_i32("i32"), i32));
  CHECK(f.shape("f64") == std::vector<std::int64_t>{3, 4, 5});
  CHECK(f.open_dataset("u16").dtype_name() == "uint16");

  // read_f32 of float64 rounds each value to nearest fp32.
  const TensorF narrowed = f.read_f32("f64");
  for (std::size_t i = 0; i < f64.numel(); ++i) CHECK(narrowed.data[i] == static_cast<float>(f64.data[i]));

  CHECK(f.exists("sub/deeper/f32"));
  CHECK_FALSE(f.exists("sub/nothing"));
  CHECK_FALSE(f.exists("f32/below_a_dataset"));
  CHECK(f.is_group("sub"));
  CHECK(f.is_dataset("f32"));
  CHECK(f.groups() == std::vector<std::string>{"sub"});
  CHECK(f.datasets() == std::vector<std::string>{"empty", "f32", "f64", "i32", "i64", "scalar", "u16", "u8"});
  CHECK(error_of([&] { f.read_exact<float>("f64"); }) ==
        "dataset 'f64' in '" + path + "' is float64, not float32");
  CHECK(error_of([&] { f.read_f32("i32"); }).find("is int32: expected float32, float64, float16") != std::string::npos);
}

TEST_CASE("attributes on the root, a group and a dataset") {
  const std::uint64_t seed = test::seed_for(102);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string path = dir.file("attrs.h5");
  std::mt19937_64 rng(seed);
  const double d = std::ldexp(static_cast<double>(rng() >> 11), -40);
  const auto i = static_cast<std::int64_t>(rng());
  std::vector<std::int32_t> v(2 + rng() % 8);  // >= 2: attr_double must refuse it
  for (auto& x : v) x = static_cast<std::int32_t>(rng());
  const std::string s = "run " + std::to_string(rng()) + " \xce\xbc";  // non-ASCII survives as UTF-8

  {
    h5::File f = h5::File::create(path);
    h5::Group g = f.create_group("g");
    h5::Dataset ds = g.write("x", test::random_tensor({2, 128}, seed, 1));
    for (h5::Object* o : std::initializer_list<h5::Object*>{&f, &g, &ds}) {
      o->set_attr("s", "first");
      o->set_attr("s", s);  // replaces
      o->set_attr("d", d);
      o->set_attr("i", i);
      o->set_attr("small", 7);
      o->set_attr("v", v);
      o->set_attr("empty", std::vector<std::int32_t>{});
    }
  }
  const h5::File f = h5::File::open(path);
  const h5::Group g = f.open_group("g");
  const h5::Dataset ds = g.open_dataset("x");
  for (const h5::Object* o : std::initializer_list<const h5::Object*>{&f, &g, &ds}) {
    INFO("object " << o->path());
    CHECK(o->attr_string("s") == s);
    CHECK(o->attr_double("d") == d);
    CHECK(o->attr_int("i") == i);
    CHECK(o->attr_int("small") == 7);
    CHECK(o->attr_double("small") == 7.0);
    CHECK(o->attr_i32_vector("v") == v);
    CHECK(o->attr_i32_vector("empty") == std::vector<std::int32_t>{});
    CHECK_FALSE(o->attr_string("missing").has_value());
    CHECK_FALSE(o->has_attr("missing"));
    CHECK(o->has_attr("d"));
    CHECK(o->attr_names() == std::vector<std::string>{"d", "empty", "i", "s", "small", "v"});
    CHECK(error_of([&] { o->attr_int("s"); }).find("is string with 1 element(s): expected one integer") !=
          std::string::npos);
  }
  CHECK(error_of([&] { f.attr_double("v"); }) ==
        "attribute 'v' of the root group in '" + path + "' is int32 with " + std::to_string(v.size()) +
            " element(s): expected one number");
}

TEST_CASE("float16 datasets decode exactly") {
  const std::uint64_t seed = test::seed_for(103);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string path = dir.file("half.h5");
  // Hand-computed: 1, -2, largest (65504), smallest subnormal (2^-24), largest subnormal
  // (1023 * 2^-24), smallest normal (2^-14), -0, 1/3 rounded (0x3555 = 0.333251953125), +-inf.
  const std::vector<std::uint16_t> hand_bits = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x8000, 0x3555,
                                                0x7c00, 0xfc00};
  const std::vector<float> hand_values = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f, 6.0975551605224609375e-05f,
                                          6.103515625e-05f, -0.0f, 0.333251953125f, INFINITY, -INFINITY};
  auto random_bits = test::random_u16(4096, seed);
  for (auto& b : random_bits) {
    if ((b & 0x7c00) == 0x7c00) b &= 0xbfff;  // keep the random part finite; specials are in the table
  }
  h5::File::create(path).close();
  const hid_t half = test::make_half_type();
  test::write_raw(path, "hand", half, {hand_bits.size()}, hand_bits.data());
  test::write_raw(path, "random", half, {64, 64}, random_bits.data());
  const std::uint16_t nan_bits = 0x7e00;
  test::write_raw(path, "nan", half, {1}, &nan_bits);
  H5Tclose(half);

  const h5::File f = h5::File::open(path);
  CHECK(f.open_dataset("hand").dtype_name() == "float16");
  const TensorF hand = f.read_f32("hand");
  for (std::size_t i = 0; i < hand_bits.size(); ++i) {
    INFO("half bits 0x" << std::hex << hand_bits[i]);
    CHECK(std::bit_cast<std::uint32_t>(hand.data[i]) == std::bit_cast<std::uint32_t>(hand_values[i]));
  }
  const TensorF rnd = f.read_f32("random");
  CHECK(rnd.shape == std::vector<std::int64_t>{64, 64});
  for (std::size_t i = 0; i < random_bits.size(); ++i) {
    INFO("half bits 0x" << std::hex << random_bits[i]);
    CHECK(static_cast<double>(rnd.data[i]) == half_value(random_bits[i]));
    CHECK(std::signbit(rnd.data[i]) == ((random_bits[i] & 0x8000) != 0));
  }
  CHECK(std::isnan(f.read_f32("nan").data[0]));
}

TEST_CASE("bfloat16 stored as uint16 or int16 with dtype=\"bfloat16\"") {
  const std::uint64_t seed = test::seed_for(104);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string path = dir.file("bf16.h5");
  // Hand-computed: 1, -3, pi rounded to bf16 (0x4049 = 3.140625), 2^-133 (smallest subnormal), -inf.
  Tensor<std::uint16_t> hand({5});
  hand.data = {0x3f80, 0xc040, 0x4049, 0x0001, 0xff80};
  const std::vector<float> hand_values = {1.0f, -3.0f, 3.140625f, std::ldexp(1.0f, -133), -INFINITY};
  // Random bf16-valued data: its bits are the top half of its fp32 bits.
  const TensorF values = test::random_tensor({3, 5, 128}, seed, 2);
  Tensor<std::uint16_t> bits(values.shape);
  std::vector<std::int16_t> signed_bits(values.numel());
  for (std::size_t i = 0; i < values.numel(); ++i) {
    bits.data[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(values.data[i]) >> 16);
    signed_bits[i] = static_cast<std::int16_t>(bits.data[i]);
  }
  {
    h5::File f = h5::File::create(path);
    f.write("hand", hand).set_attr("dtype", "bfloat16");
    f.write("values", bits).set_attr("dtype", "bfloat16");
    f.write("unmarked", bits);
    f.write("wrong_mark", bits).set_attr("dtype", "float16");
    f.close();
  }
  test::write_raw(path, "int16", H5T_STD_I16LE, {3, 5, 128}, signed_bits.data());
  {
    // A fixed-length, NUL-padded marker, as numpy bytes (np.bytes_) give it.
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    const hid_t ds = H5Dopen2(file, "int16", H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 8);
    H5Tset_strpad(type, H5T_STR_NULLPAD);
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t attr = H5Acreate2(ds, "dtype", type, space, H5P_DEFAULT, H5P_DEFAULT);
    REQUIRE(H5Awrite(attr, type, "bfloat16") >= 0);
    H5Aclose(attr);
    H5Sclose(space);
    H5Tclose(type);
    H5Dclose(ds);
    H5Fclose(file);
  }

  const h5::File f = h5::File::open(path);
  const TensorF h = f.read_f32("hand");
  for (std::size_t i = 0; i < hand_values.size(); ++i) {
    CHECK(std::bit_cast<std::uint32_t>(h.data[i]) == std::bit_cast<std::uint32_t>(hand_values[i]));
  }
  CHECK(same_bits(f.read_f32("values"), values));
  CHECK(f.open_dataset("int16").attr_string("dtype") == "bfloat16");
  CHECK(same_bits(f.read_f32("int16"), values));
  CHECK(error_of([&] { f.read_f32("unmarked"); }) ==
        "dataset 'unmarked' in '" + path +
            "' is uint16: if it holds bfloat16 bits, add the string attribute dtype=\"bfloat16\" to it "
            "(h5py: ds.attrs['dtype'] = 'bfloat16')");
  CHECK(error_of([&] { f.read_f32("wrong_mark"); }).find("its dtype attribute is 'float16'") != std::string::npos);
}

TEST_CASE("read_i32 takes int32 and int64 and checks the range") {
  const std::uint64_t seed = test::seed_for(105);
  INFO("seed " << seed);
  TempDir dir(seed);
  const std::string path = dir.file("ints.h5");
  auto wide = random_ints<std::int64_t>({6}, seed);
  for (auto& x : wide.data) x = static_cast<std::int32_t>(x);  // in range
  auto too_wide = wide;
  too_wide.data[4] = (std::int64_t{1} << 40) + 1;
  {
    h5::File f = h5::File::create(path);
    f.write("ok", wide);
    f.write("bad", too_wide);
    f.write("float", test::random_tensor({4}, seed, 1));
  }
  const h5::File f = h5::File::open(path);
  const auto ok = f.read_i32("ok");
  for (std::size_t i = 0; i < wide.numel(); ++i) CHECK(ok.data[i] == wide.data[i]);
  CHECK(error_of([&] { f.read_i32("bad"); }) ==
        "dataset 'bad' in '" + path + "': element 4 = 1099511627777 does not fit in int32");
  CHECK(error_of([&] { f.read_i32("float"); }) ==
        "dataset 'float' in '" + path + "' is float32: expected an integer dataset");
}

TEST_CASE("error messages name the file, the object and the fix") {
  const std::uint64_t seed = test::seed_for(106);
  INFO("seed " << seed);
  TempDir dir(seed);

  const std::string missing = dir.file("missing.h5");
  CHECK(error_of([&] { h5::File::open(missing); }) == "no such file '" + missing + "'");

  const std::string garbage = dir.file("garbage.h5");
  {
    const auto bytes = test::random_u16(2048, seed);
    std::ofstream(garbage, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), 4096);
  }
  CHECK(error_of([&] { h5::File::open(garbage); }) == "'" + garbage + "' is not an HDF5 file");

  const std::string path = dir.file("x.h5");
  {
    h5::File f = h5::File::create(path);
    f.write("A", test::random_tensor({4, 128}, seed, 1));
    Tensor<std::int32_t> offs({2});
    offs.data = {1, 4};
    f.write("offs", offs);
    f.create_group("g").write("B", test::random_tensor({4, 128}, seed, 2));
    CHECK(error_of([&] { f.write("A", test::random_tensor({4, 128}, seed, 3)); }) ==
          "cannot write dataset 'A' in '" + path + "': the name exists already");
    CHECK(error_of([&] { f.create_group("g"); }) ==
          "cannot create group 'g' in '" + path + "': the name exists already");
  }
  const h5::File f = h5::File::open(path);
  CHECK(error_of([&] { f.read_f32("W"); }) ==
        "cannot open dataset 'W' in '" + path + "': no such dataset (datasets here: A, offs)");
  CHECK(error_of([&] { f.open_group("g").read_f32("W"); }) ==
        "cannot open dataset 'g/W' in '" + path + "': no such dataset (datasets here: B)");
  CHECK(error_of([&] { f.open_group("h"); }) ==
        "cannot open group 'h' in '" + path + "': no such group (groups here: g)");
  CHECK(error_of([&] { f.read_f32("g"); }) ==
        "cannot open dataset 'g' in '" + path + "': it is a group, not a dataset");
  CHECK(error_of([&] { f.open_group("A"); }) == "cannot open group 'A' in '" + path + "': it is not a group");

  // A failing HDF5 call names itself and HDF5's reason.
  const std::string no_dir = dir.file("no/such/dir.h5");
  const std::string msg = error_of([&] { h5::File::create(no_dir); });
  CHECK(msg.rfind("cannot create '" + no_dir + "': H5Fcreate failed (", 0) == 0);
  CHECK(msg.find("failed (no reason") == std::string::npos);
}

TEST_CASE("handles are move-only owners") {
  static_assert(!std::is_copy_constructible_v<h5::Handle>);
  static_assert(!std::is_copy_constructible_v<h5::File>);
  static_assert(std::is_nothrow_move_constructible_v<h5::Handle>);
  const std::uint64_t seed = test::seed_for(107);
  TempDir dir(seed);
  h5::File a = h5::File::create(dir.file("move.h5"));
  const h5::Id id = a.id();
  h5::File b = std::move(a);
  CHECK(b.id() == id);
  CHECK(a.id() == -1);  // NOLINT(bugprone-use-after-move): the moved-from handle is empty by contract
  b.write("x", test::random_tensor({1, 128}, seed, 1));
  b.close();
  CHECK(b.id() == -1);
  CHECK(same_bits(h5::File::open(dir.file("move.h5")).read_f32("x"), test::random_tensor({1, 128}, seed, 1)));
}
